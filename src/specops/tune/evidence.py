"""The tune's decision figures, from the side-by-side measurement's blocks.

Every candidate is compared with **the unit's plain decoding** (speculation off, everything else as the unit runs it:
the bench's ``baseline`` under ``--plain unit``; ``exact-baseline`` in runs made before it), **paired in the same
blocks**: per block the candidate's decode rate ÷ the reference's, per task the geometric mean over repetitions.

The interval is a Student-t interval on the per-task log ratios with **no finite-population correction**: it speaks
for a new request of the workload (the tasks' own spread counts in full, and so does the timing noise of both
servers, which is in every paired ratio), not for the fixed set that happened to run. The whole mix pools the tasks
of every workload (each task weighs the same).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specops.bench.arms import AA, BASELINE
from specops.bench.stats import Interval, geomean_ratio_ci
from specops.tune.decide import Choice, Measured, choose


class Blocks:
    """The blocks of one measurement: per block its workload, task and each server's decode tok/s."""

    def __init__(self, records: Iterable[Mapping[str, Any]]) -> None:
        self.rows: list[tuple[str, str, dict[str, float]]] = []
        for rec in records:
            tps = {arm: float(r["decode_tps"]) for arm, r in (rec.get("results") or {}).items()
                   if isinstance(r, Mapping) and r.get("decode_tps") and float(r["decode_tps"]) > 0}
            self.rows.append((str(rec.get("workload")), str(rec.get("task")), tps))

    @classmethod
    def load(cls, path: Path) -> Blocks:
        """``blocks.jsonl`` of a bench work dir (a line that is not JSON is skipped: a block cut by a kill)."""
        records = []
        for line in Path(path).read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return cls(records)

    def only(self, workload: str) -> Blocks:
        """The blocks of one workload."""
        view = Blocks(())
        view.rows = [r for r in self.rows if r[0] == workload]
        return view

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(wl for wl, _, _ in self.rows))

    @property
    def arms(self) -> list[str]:
        return list(dict.fromkeys(a for _, _, tps in self.rows for a in tps))

    def task_ratios(self, arm: str, ref: str, workload: str | None = None) -> dict[str, float]:
        """``{task: geometric mean of arm ÷ ref over the blocks where both ran}`` (``ref`` the bench's baseline: the
        geometric mean of it and its A/A twin where the twin ran in the block, as the bench forms its ratios)."""
        logs: dict[str, list[float]] = {}
        for wl, task, tps in self.rows:
            if (workload is None or wl == workload) and arm in tps and ref in tps:
                base = tps[ref]
                if ref == BASELINE and arm != AA and AA in tps:  # the A/A twin ran too: both, as the bench does
                    base = math.sqrt(base * tps[AA])
                logs.setdefault(f"{wl}/{task}", []).append(math.log(tps[arm] / base))
        return {t: math.exp(sum(v) / len(v)) for t, v in logs.items()}

    def interval(self, arm: str, ref: str, workload: str | None = None) -> Interval | None:
        """The decision interval of ``arm`` against ``ref`` (None: never in a block with it)."""
        ratios = self.task_ratios(arm, ref, workload)
        return geomean_ratio_ci(list(ratios.values())) if ratios else None

    def measured(self, names: Iterable[str], ref: str,
                 identical: Mapping[str, bool | None] | None = None) -> tuple[list[Measured], list[str]]:
        """Each candidate's decision interval against ``ref``, and one line for each that never ran in a block with
        ``ref`` (it cannot be compared exactly: left out of the decision)."""
        out: list[Measured] = []
        missing: list[str] = []
        for name in names:
            iv = self.interval(name, ref)
            if iv is None:
                missing.append(f"{name}: never measured in a block with plain decoding ({ref}): left out of the "
                               "decision")
            else:
                out.append(Measured(name, iv, (identical or {}).get(name)))
        return out, missing

    def decide(self, names: Iterable[str], ref: str, need_identical: bool = True, margin: float = 0.05,
               identical: Mapping[str, bool | None] | None = None, workload: str | None = None) -> Choice:
        """The choice among ``names`` against ``ref`` (over the whole mix, or one workload)."""
        view = self if workload is None else self.only(workload)
        measured, missing = view.measured(names, ref, identical)
        return choose(measured, need_identical, margin, paired=lambda a, b: view.interval(a, b), left_out=missing)
