"""The tune's decisions, apart from any server: which candidates may pay, which to measure, which to deploy.

1. **Predict** every candidate from the host's step costs (llama-bench), the server's overheads (a plain run and
   the probes, :mod:`specops.bench.costmodel`) and the acceptance the probes saw: a draft-model length k from
   the longest probe's per-position counters (a shorter greedy draft is a prefix of the longer one), an n-gram
   type or llama.cpp's ``default`` from its own probe's counters.
2. **Shortlist** the best few whose prediction clears plain decoding by a margin; a candidate that cannot be
   predicted (no probe) is measured only if room is left.
3. **Choose** from the side-by-side measurement against plain decoding: the fastest candidate whose interval lies
   wholly above 1 (and, under the identity rule, whose output was identical to plain decoding's), else plain
   decoding; the runner-up is kept for the record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops.bench.costmodel import (
    Overheads,
    Run,
    StepCosts,
    expected_accepted,
    predicted_run_speedup,
    predicted_speedup,
    survival,
)
from specops.bench.stats import Interval

PLAIN = "plain"
DRAFT_LENGTHS = (2, 4, 8, 12, 16)


@dataclass(frozen=True)
class Probe:
    """A short speculative run of one candidate: its counters (per position where the server has them)."""

    name: str
    run: Run
    per_pos: Mapping[str, float] = field(default_factory=dict)
    k: int | None = None  # the draft length it ran with (draft-model probes)


@dataclass(frozen=True)
class Prediction:
    name: str
    predicted: float | None
    how: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "predicted": self.predicted, "how": self.how}


def draft_arm(k: int) -> str:
    """The bench's name of a draft-model candidate at length k."""
    return f"draft-n{k}"


def predict(costs: StepCosts, over: Overheads, draft_probe: Probe | None, lengths: Sequence[int],
            other_probes: Sequence[Probe] = (), name_of: Callable[[int], str] = draft_arm) -> list[Prediction]:
    """A prediction per candidate: each draft length from ``draft_probe`` (the longest length run), each other
    probe (n-gram types, ``default``) from its own counters, priced without a draft model."""
    out: list[Prediction] = []
    if draft_probe is not None:
        surv = survival(draft_probe.per_pos, draft_probe.run.drafts)
        for k in lengths:
            name = name_of(k)
            if k > len(surv):
                out.append(Prediction(name, None, f"longer than the probe's {len(surv)} positions"))
                continue
            acc = expected_accepted(surv, k)
            out.append(Prediction(name, predicted_speedup(costs, over, k, acc),
                                  f"{acc:.2f} accepted per round (the n{draft_probe.k} probe truncated at {k})"))
    free = StepCosts(costs.target_step_s, costs.target_rel)  # no draft model: the target's costs alone
    for p in other_probes:
        if p.run.n_tokens <= 0:
            out.append(Prediction(p.name, None, "its probe generated nothing"))
            continue
        acc = f"{p.run.accepted / p.run.drafts:.2f} accepted per draft" if p.run.drafts else "drafted nothing"
        out.append(Prediction(p.name, predicted_run_speedup(free, over, p.run), f"its own probe: {acc}"))
    return out


def ceiling_bounds(costs: StepCosts, lengths: Sequence[int]) -> dict[int, float]:
    """The most each draft length could gain: every drafted token accepted and no server overhead (which only pulls
    a ratio toward 1). Below the margin for every length, no acceptance can pay on this host and the draft model's
    probes are not worth their minutes (on a 2-core CPU the longest draft probe alone took ~45 s)."""
    return {k: predicted_speedup(costs, Overheads(0.0), k, float(k)) for k in lengths}


def shortlist(preds: Sequence[Prediction], top: int = 3, margin: float = 0.05) -> tuple[list[str], dict[str, str]]:
    """The candidates to measure (best predicted first, at most ``top``) and why each other one is not."""
    known = sorted((p for p in preds if p.predicted is not None and math.isfinite(p.predicted)),
                   key=lambda p: -float(p.predicted or 0))
    chosen: list[str] = []
    dropped: dict[str, str] = {}
    for p in known:
        assert p.predicted is not None
        if p.predicted < 1.0 + margin:
            dropped[p.name] = f"predicted {p.predicted:.2f}×: cannot clear plain decoding by {margin:.0%}"
        elif len(chosen) < top:
            chosen.append(p.name)
        else:
            dropped[p.name] = f"predicted {p.predicted:.2f}×: below the {top} best"
    for p in preds:
        if p.predicted is None or not math.isfinite(p.predicted):
            if len(chosen) < top:
                chosen.append(p.name)
            else:
                dropped[p.name] = f"no prediction ({p.how}) and no room left"
    return chosen, dropped


@dataclass(frozen=True)
class Measured:
    """One candidate measured side by side with plain decoding."""

    name: str
    speedup: Interval
    identical: bool | None = None  # output identical to plain decoding's on every request (None: not judged)


@dataclass(frozen=True)
class Choice:
    chosen: str  # a candidate's name, or "plain"
    runner_up: str | None
    reason: str
    figures: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "runner_up": self.runner_up, "reason": self.reason,
                "figures": dict(self.figures)}


def choose(measured: Sequence[Measured], need_identical: bool = True) -> Choice:
    """The fastest measured candidate that is confidently faster than plain decoding (and identical in output
    where required); plain decoding when none is."""
    figures = {m.name: m.speedup.fmt() for m in measured}
    eligible: list[Measured] = []
    for m in measured:
        if not m.speedup.significantly_above(1.0):
            continue
        if need_identical and m.identical is not True:
            continue
        eligible.append(m)
    eligible.sort(key=lambda m: -m.speedup.estimate)
    if not eligible:
        why = "; ".join(f"{m.name} {m.speedup.fmt()}"
                        + (" (output differs)" if need_identical and m.identical is False else "")
                        for m in measured) or "nothing measured"
        return Choice(PLAIN, None, f"no candidate beat plain decoding with a confident interval: {why}", figures)
    best = eligible[0]
    runner = eligible[1].name if len(eligible) > 1 else None
    return Choice(best.name, runner, f"{best.name} {best.speedup.fmt()} against plain decoding", figures)
