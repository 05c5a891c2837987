"""The tune's short probes: one server at a time, a few prompts each, counters read back.

Candidates are named and probed as their kind says (:mod:`specops.kinds`). The probes run each server alone on the
machine (loaded, warmed up, the prompts one after another, stopped), so their seconds are the server's own: the plain
server gives the per-token overhead, a kind with lengths probed at its longest and its shortest length the per-round
terms and the per-position acceptance, each n-gram probe its own acceptance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops.bench.arms import Arm, parse_arm
from specops.bench.costmodel import Run
from specops.bench.runner import BenchConfig, Loaded
from specops.bench.store import ResultStore
from specops.bench.tasks import Task

PLAIN_ARM = "exact-baseline"


@dataclass
class ProbeResult:
    arm: str
    run: Run
    per_pos: dict[str, float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {"arm": self.arm, "n_tokens": r.n_tokens, "seconds": r.seconds, "drafts": r.drafts,
                "drafted": r.drafted, "accepted": r.accepted, "per_pos": self.per_pos, "error": self.error}


def probe_arm(arm: Arm, cfg: BenchConfig, store: ResultStore, tasks: Sequence[Task]) -> ProbeResult:
    """Load ``arm``'s server alone, send ``tasks`` one after another, read its counters, stop it. The seconds
    are the server's own decode time (``timings.predicted_ms``), so a slow client does not count."""
    loaded = Loaded(arm, cfg, store, rep=0)
    try:
        loaded.counters_delta()  # the warm-up's drafts are not the probe's
        n = secs = 0.0
        texts: dict[str, str] = {}
        for task in tasks:
            res = loaded.send(task, cfg)
            n += res.n_predicted
            secs += float(res.timings.get("predicted_ms") or 0.0) / 1e3
            texts[task.id] = res.text
        c = loaded.counters_delta()
    finally:
        loaded.close()
    run = Run(n, secs, float(c["drafts"]), float(c["draft_tokens"]), float(c["accepted"]))
    return ProbeResult(arm.name, run, {str(k): float(v) for k, v in c["per_pos"].items()}, texts)


def probe(name: str, cfg: BenchConfig, store: ResultStore, tasks: Sequence[Task],
          note: Callable[[str], None]) -> ProbeResult:
    """Arm ``name`` probed (:func:`probe_arm`); a server that fails to start or to speculate is kept as an error (its
    candidate cannot be predicted), never a crash of the tune."""
    note(f"tune: probing {name} ({len(tasks)} prompts, alone on the machine)")
    try:
        return probe_arm(parse_arm(name), cfg, store, tasks)
    except Exception as exc:  # a candidate that cannot run is a finding, not a crash of the tune
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        note(f"tune: {name} could not be probed: {first}")
        return ProbeResult(name, Run(0, 0), error=first)
