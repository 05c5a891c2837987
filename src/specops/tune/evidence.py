"""The tune's decision figures, from the side-by-side measurement's blocks.

Every candidate is compared with **the unit's plain decoding** (speculation off, everything else as the unit runs it:
the bench's ``baseline`` under ``--plain unit``; ``exact-baseline`` in runs made before it), **paired in the same
blocks**: per block the candidate's decode rate ÷ the reference's, per task the geometric mean over repetitions.

The interval is a Student-t interval on the per-task log ratios with **no finite-population correction**: a
confidence interval for the workload's mean speedup (the tasks' own spread counts in full, and so does the timing
noise of both servers, which is in every paired ratio), not only for the fixed set that happened to run; one new
request spreads wider (a prediction interval). Without a mix the whole
figure pools the tasks of every workload (each task weighs the same; the tune passes the task set's own shares
as the mix instead where every workload has the tasks for it, :func:`specops.tune.choose.shares`). With a mix
(each workload's share of the requests) it is the mix's speedup **weighted by time**, 1 / Σ_k (w_k / H_k) with H_k
workload k's harmonic mean of the per-task ratios, and its delta-method interval (:mod:`specops.tune.mix`, where
it is derived).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specops.bench import weighted
from specops.bench.arms import AA, BASELINE
from specops.bench.stats import Interval, geomean_ratio_ci
from specops.kinds import PLAIN
from specops.tune import mix as mixes
from specops.tune.decide import Choice, Measured, choose


class Blocks:
    """The blocks of one measurement: per block its workload, task and each server's decode tok/s."""

    def __init__(self, records: Iterable[Mapping[str, Any]]) -> None:
        self.rows: list[tuple[str, str, dict[str, float]]] = []
        self.seconds: dict[str, list[float]] = {}  # per "arm/workload/task": its decode seconds a request
        for rec in records:
            results = rec.get("results") or {}
            tps = {arm: float(r["decode_tps"]) for arm, r in results.items()
                   if isinstance(r, Mapping) and r.get("decode_tps") and float(r["decode_tps"]) > 0}
            self.rows.append((str(rec.get("workload")), str(rec.get("task")), tps))
            for arm, r in results.items():
                secs = weighted.request_seconds(r) if isinstance(r, Mapping) else None
                if secs:
                    self.seconds.setdefault(f"{arm}/{rec.get('workload')}/{rec.get('task')}", []).append(secs)

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

    def relative_times(self, arm: str, ref: str, versus: str | None = None) -> dict[str, list[tuple[float, float]]]:
        """Per workload, per task: (``arm``'s, ``versus``'s) decode time per request relative to ``ref``'s (1 / the
        paired ratio; ``versus`` None: ``ref`` itself, 1), over the tasks both were measured on."""
        a = self.task_ratios(arm, ref)
        b = self.task_ratios(versus, ref) if versus is not None else {}
        out: dict[str, list[tuple[float, float]]] = {}
        for task, r in a.items():
            if versus is None or task in b:
                out.setdefault(task.split("/", 1)[0], []).append((1 / r, 1 / b[task] if versus else 1.0))
        return out

    def timed(self, arm: str, ref: str, versus: str | None = None) -> dict[str, list[tuple[float, float]]]:
        """Per workload, per task: (``arm``'s, ``versus``'s) decode time of a request, in ``ref``'s seconds where
        every such task's are known (:func:`specops.bench.weighted.timed`: shares of requests weigh by plain time),
        else relative to ``ref``'s (1 / the paired ratio; as :meth:`relative_times`)."""
        def by_workload(ratios: Mapping[str, float]) -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = {}
            for key, value in ratios.items():
                wl, task = key.split("/", 1)
                out.setdefault(wl, {})[task] = value
            return out

        secs = {k: sum(v) / len(v) for k, v in self.seconds.items() if k.startswith(f"{ref}/")}
        return weighted.timed(by_workload(self.task_ratios(arm, ref)),
                              by_workload({k.split("/", 1)[1]: v for k, v in secs.items()}),
                              by_workload(self.task_ratios(versus, ref)) if versus is not None else None)

    def check_mix(self, mix: Mapping[str, float]) -> None:
        """A workload with a share but no block measured: MixError (one line)."""
        missing = [w for w in mixes.normalised(mix) if w not in self.workloads]
        if missing:
            raise mixes.MixError(f"workload(s) {', '.join(missing)} in the mix but no task of it measured (measured: "
                                 f"{', '.join(self.workloads) or 'none'})")

    def mix_gaps(self, arm: str, ref: str, mix: Mapping[str, float]) -> list[str]:
        """The mix's workloads ``arm`` has no task of paired with ``ref``."""
        have = self.relative_times(arm, ref)
        return [w for w in mixes.normalised(mix) if not have.get(w)]

    def mix_interval(self, arm: str, ref: str, mix: Mapping[str, float], versus: str | None = None) -> Interval | None:
        """``arm`` against ``ref`` (or against ``versus``, each timed against ``ref``) over the mix, weighted by time
        (:func:`specops.tune.mix.speedup`); None where a workload of the mix has no such task."""
        times = self.timed(arm, ref, versus)
        if any(not times.get(w) for w in mixes.normalised(mix)):
            return None
        return mixes.speedup(times, mix)

    def mix_arithmetic(self, arm: str, ref: str, mix: Mapping[str, float]) -> str:
        """The mix figure's arithmetic (for the record): each workload's ratio (its plain time ÷ its time, a
        harmonic mean of the per-task ratios weighted by time) at its share of plain decoding's time, and how the
        shares of requests became those (issue 62 item 4)."""
        times = self.timed(arm, ref)
        shares = mixes.normalised(mix)
        means = {w: sum(b for _, b in times[w]) / sum(a for a, _ in times[w]) for w in shares}
        by_time = weighted.time_shares(times, shares)
        text = mixes.arithmetic(means, by_time)
        if times != self.relative_times(arm, ref):
            per = ", ".join(f"{w} {shares[w]:.0%} at {sum(b for _, b in times[w]) / len(times[w]):.1f} s"
                            for w in shares)
            text += (f" (shares of plain decoding's time, from the shares of requests at each workload's measured "
                     f"plain decode seconds a request: {per})")
        else:
            text += " (every request counted as the same time: no per-request seconds recorded)"
        return text

    def figure(self, name: str, ref: str, mix: Mapping[str, float] | None = None) -> Interval | str:
        """``name``'s decision interval against ``ref`` (over ``mix`` when given), or the line that says why it has
        none: never in a block with ``ref``, or, with a mix, no task of one of its workloads."""
        ratios = self.task_ratios(name, ref)
        if not ratios:
            return f"{name}: never measured in a block with plain decoding ({ref}): left out of the decision"
        if not mix:
            return geomean_ratio_ci(list(ratios.values()))
        gaps = self.mix_gaps(name, ref, mix)
        if gaps:
            return (f"{name}: no task of {', '.join(gaps)} (in the mix) measured in a block with plain decoding "
                    f"({ref}): left out of the decision")
        iv = self.mix_interval(name, ref, mix)
        assert iv is not None
        return iv

    def measured(self, names: Iterable[str], ref: str, identical: Mapping[str, bool | None] | None = None,
                 mix: Mapping[str, float] | None = None) -> tuple[list[Measured], list[str]]:
        """Each candidate's decision interval against ``ref`` (over ``mix`` when given, weighted by time), and one
        line for each that never ran in a block with ``ref`` or, with a mix, lacks a workload of it (it cannot be
        compared exactly: left out of the decision)."""
        out: list[Measured] = []
        missing: list[str] = []
        if mix:
            self.check_mix(mix)
        for name in names:
            fig = self.figure(name, ref, mix)
            if isinstance(fig, str):
                missing.append(fig)
            else:
                out.append(Measured(name, fig, (identical or {}).get(name)))
        return out, missing

    def decide(self, names: Iterable[str], ref: str, need_identical: bool = True, margin: float = 0.05,
               identical: Mapping[str, bool | None] | None = None, workload: str | None = None,
               mix: Mapping[str, float] | None = None, level: float | None = None) -> Choice:
        """The choice among ``names`` against ``ref``: over the whole mix (each task weighing the same, or with
        ``mix`` the mix's speedup weighted by time, its arithmetic added to the reason), or one workload (``mix``
        not used). ``level``: :func:`specops.tune.decide.choose`'s (None: the run's error budget)."""
        if workload is not None or not mix:
            view = self if workload is None else self.only(workload)
            measured, missing = view.measured(names, ref, identical)
            return choose(measured, need_identical, margin, paired=lambda a, b: view.interval(a, b),
                          left_out=missing, level=level)
        measured, missing = self.measured(names, ref, identical, mix)
        choice = choose(measured, need_identical, margin, left_out=missing, level=level,
                        paired=lambda a, b: self.mix_interval(a, ref, mix, versus=b))
        shown = choice.chosen if choice.chosen != PLAIN else choice.runner_up
        if shown is None:
            return choice
        return dataclasses.replace(choice, reason=f"{choice.reason}; the mix, weighted by time: {shown} "
                                                  f"{self.mix_arithmetic(shown, ref, mix)}")
