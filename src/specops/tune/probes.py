"""The tune's third step, the probes: one short server at a time, a few prompts each, counters read back: plain
decoding, then what each kind's probe is (:func:`specops.kinds.probe_names`: a kind with lengths at its longest and
its shortest, the others each their own) while the probes' share of the budget lasts (:func:`run_probes`); then plain
decoding again, to see whether the host's speed moved meanwhile.

Candidates are named and probed as their kind says (:mod:`specops.kinds`). The probes run each server alone on the
machine (loaded, warmed up, the prompts one after another, stopped), so their seconds are the server's own: the plain
server gives the per-token overhead, a kind with lengths probed at its longest and its shortest length the per-round
terms and the per-position acceptance, each n-gram probe its own acceptance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops import kinds
from specops.bench.arms import Arm, parse_arm
from specops.bench.costmodel import Run
from specops.bench.runner import BenchConfig, Loaded
from specops.bench.store import ResultStore
from specops.bench.tasks import Task
from specops.tune.state import Setup, TuneError

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


MAX_DRIFT = 0.15  # the plain server's speed may move this much between the first and the last probe


def probe_names(s: Setup) -> list[str]:
    """The plain server, then each kind's probes (:func:`specops.kinds.probe_names`)."""
    return [PLAIN_ARM, *kinds.probe_names(s.names, s.ngram_probes)]


@dataclass(frozen=True)
class Probes:
    """What the probes found: each probe's result (plain decoding's both runs counted as one), how far the plain
    server's speed moved between its first and its last probe (None: unknown), and what stays open."""

    found: dict[str, ProbeResult]
    drift: float | None = None
    open: tuple[str, ...] = ()


def run_probes(s: Setup, names: list[str]) -> Probes:
    """The plain server and each kind's longest length always (nothing of it can be predicted without them,
    :func:`specops.kinds.essential`); the others while the probes' share of the budget lasts. ``names``: the
    candidates still in (the ceiling's pruning left out)."""
    out: dict[str, ProbeResult] = {}
    said: list[str] = []
    essential = {PLAIN_ARM, *kinds.essential(names)}
    todo = [n for n in probe_names(s) if n == PLAIN_ARM or n in names]
    for i, name in enumerate(todo, 1):
        if name not in essential and time.monotonic() >= s.probe_until:
            said.append(f"{name}: not probed (the probes' share of the budget was spent)")
            continue
        s.meter.update("probes", f"{name} ({i}/{len(todo)})", s.left())
        out[name] = probe(name, s.cfg, s.store, s.probe_tasks, s.progress.note)
    plain = out.get(PLAIN_ARM)
    if plain is None or plain.error or plain.run.n_tokens <= 0:
        why = plain.error if plain else "not run"
        raise TuneError(f"the plain server could not be measured ({why}); nothing was changed")
    again, drift, more = _bracket(s, plain)
    if again is not None:
        out[PLAIN_ARM] = again
    return Probes(out, drift, (*said, *more))


def _bracket(s: Setup, first: ProbeResult) -> tuple[ProbeResult | None, float | None, list[str]]:
    """The plain server once more after the other probes: the probes ran one after another, so a host whose speed
    moved meanwhile (another process's load) would skew every prediction. Both plain runs count (the result, or
    None where the second failed); a drift beyond MAX_DRIFT is said (the side-by-side measurement, paired, is not
    affected)."""
    s.meter.update("probes", "plain decoding again (did the host's speed move meanwhile?)", s.left())
    again = probe(PLAIN_ARM, s.cfg, s.store, s.probe_tasks, s.progress.note)
    if again.error or again.run.n_tokens <= 0 or again.run.seconds <= 0:
        return None, None, [f"the plain server's second probe failed ({again.error or 'nothing generated'}): drift "
                            "unknown"]
    drift = again.run.seconds_per_token / first.run.seconds_per_token - 1
    said = [] if abs(drift) <= MAX_DRIFT else [
        f"the plain server's speed moved {drift:+.0%} between the first and the last probe (other load on the "
        "host?): the predictions are unreliable; only the side-by-side measurement decides"]
    both = ProbeResult(PLAIN_ARM, Run(first.run.n_tokens + again.run.n_tokens,
                                                    first.run.seconds + again.run.seconds), texts=first.texts)
    return both, drift, said
