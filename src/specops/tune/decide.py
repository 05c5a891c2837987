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

from specops import kinds
from specops.bench.costmodel import (
    Overheads,
    Run,
    StepCosts,
    expected_accepted,
    predicted_run_speedup,
    predicted_speedup,
    survival,
)
from specops.bench.design import deployable
from specops.bench.stats import Interval, t975
from specops.kinds import PLAIN


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


PREDICTION_ERROR = 0.10  # the predictions' goal (|measured / predicted - 1|): closer than this, they cannot tell


def shortlist(preds: Sequence[Prediction], top: int = 3, margin: float = 0.05, error: float = PREDICTION_ERROR,
              always: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The candidates to measure (best predicted first, at most ``top``) and why each other one is not.

    ``always``: measured whatever their rank unless the prediction rules them out by more than its own error, and
    whatever the room when they have no prediction (the engine's own default: a tune never ends behind it without a
    measured reason). A candidate left out although its
    prediction is within ``error`` of the last one kept is said so ("stays open"), not ruled out."""
    known = sorted((p for p in preds if p.predicted is not None and math.isfinite(p.predicted)),
                   key=lambda p: -float(p.predicted or 0))
    chosen: list[str] = []
    dropped: dict[str, str] = {}
    for p in known:
        assert p.predicted is not None
        if p.name in always and p.predicted * (1 + error) >= 1.0 + margin:
            chosen.append(p.name)
        elif p.predicted < 1.0 + margin:
            dropped[p.name] = f"predicted {p.predicted:.2f}×: cannot clear plain decoding by {margin:.0%}"
        elif len([c for c in chosen if c not in always]) < top:
            chosen.append(p.name)
        else:
            last = min(float(q.predicted or 0) for q in known if q.name in chosen and q.name not in always)
            dropped[p.name] = (f"predicted {p.predicted:.2f}×: below the {top} best"
                               + (f", but within the predictions' {error:.0%} error of them ({last:.2f}×): stays open"
                                  if p.predicted * (1 + error) >= last else ""))
    for p in preds:
        if p.predicted is None or not math.isfinite(p.predicted):
            # the engine's default unpredicted (a CPU build measures the n-gram types instead of probing them) is
            # measured whatever the room: predicted draft lengths once took both places and it went unmeasured
            if len(chosen) < top or p.name in always:
                chosen.append(p.name)
            else:
                dropped[p.name] = f"no prediction ({p.how}) and no room left: stays open"
    return chosen, dropped


@dataclass(frozen=True)
class Measured:
    """One candidate measured side by side with plain decoding."""

    name: str
    speedup: Interval
    identical: bool | None = None  # output identical to plain decoding's on every request (None: not judged)


def tasks_to_settle(iv: Interval, margin: float, most: int = 500) -> int | None:
    """The tasks an undecided figure like ``iv`` would need to settle if its estimate and the tasks' spread held as
    measured: its 95% half-width on the log scale, t(n-1)·s/√n, below the distance to 1 (confidently faster) or to
    1 + ``margin`` (confidently unable to gain it), whichever comes first (at least half of log(1 + margin) away:
    every estimate settles at some size). None: no interval (fewer than two tasks), or not within ``most`` tasks."""
    if not iv.has_ci or iv.n < 2 or iv.estimate <= 0:
        return None
    assert iv.low is not None and iv.high is not None
    s = (math.log(iv.high) - math.log(iv.low)) / 2 * math.sqrt(iv.n) / t975(iv.n - 1)  # the per-task spread
    gap = max(math.log(iv.estimate), math.log(1 + margin) - math.log(iv.estimate))
    if gap <= 0:
        return None
    return next((n for n in range(max(2, iv.n), most + 1) if t975(n - 1) * s / math.sqrt(n) < gap), None)


@dataclass(frozen=True)
class Choice:
    chosen: str  # a candidate's name, or "plain"
    runner_up: str | None
    reason: str
    figures: Mapping[str, str]
    tie: tuple[str, ...] = ()  # what the best's interval cannot be told from (plain included), cheapest first
    settled: bool = True  # False: undecided (plain decoding served, the figures could not settle it)
    paired: str | None = None  # the chosen ÷ the runner-up, paired in the same blocks
    left_out: tuple[str, ...] = ()  # measured but out of the decision, one line each
    settle: tuple[str, ...] = ()  # for what stayed undecided (overall, per workload): the tasks that would settle it
    weighed: str = ""  # how the whole figure weighs the workloads, for the record ('' : as --mix says)
    to_settle_min: float | None = None  # undecided: the minutes of measuring more that would settle the whole figure
    pairs: tuple[str, ...] = ()  # held-back types measured beside a shortlisted one: their paired ratios
    to_settle_tasks: tuple[int, int] | None = None  # undecided: (the tasks that would settle it, the task set's)

    def short(self) -> str:
        """One line: the choice and its figure (a tie named), or plain / undecided with the best candidate's."""
        if self.chosen != PLAIN:
            tie = [n for n in self.tie if n != self.chosen]
            return f"{self.chosen} {self.figures.get(self.chosen, '')}" + (f" (ties with {', '.join(tie)})"
                                                                            if tie else "")
        head = PLAIN if self.settled else "undecided"
        best = f" (best {self.runner_up} {self.figures.get(self.runner_up, '')})" if self.runner_up else ""
        return head + best

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "runner_up": self.runner_up, "reason": self.reason,
                "figures": dict(self.figures), "tie": list(self.tie), "settled": self.settled,
                "paired": self.paired, "left_out": list(self.left_out), "settle": list(self.settle),
                "weighed": self.weighed, "to_settle_min": self.to_settle_min, "pairs": list(self.pairs),
                "to_settle_tasks": list(self.to_settle_tasks) if self.to_settle_tasks else None}


def overlaps(a: Interval, b: Interval) -> bool:
    """Do two intervals share a value (the data cannot tell them apart)?"""
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None
    return a.low <= b.high and b.low <= a.high


def _usable(measured: Sequence[Measured], need_identical: bool) -> tuple[list[Measured], list[str]]:
    usable: list[Measured] = []
    left: list[str] = []
    for m in measured:
        if not m.speedup.has_ci:
            left.append(f"{m.name}: {m.speedup.n} task(s) against plain decoding, no interval: out of the decision")
        elif need_identical and m.identical is False:
            left.append(f"{m.name}: output differs from plain decoding's: out under the identity rule")
        elif need_identical and m.identical is None:
            left.append(f"{m.name}: output identity not judged: out under the identity rule")
        else:
            usable.append(m)
    return usable, left


def choose(measured: Sequence[Measured], need_identical: bool = True, margin: float = 0.05,
           paired: Callable[[str, str], Interval | None] | None = None, left_out: Sequence[str] = ()) -> Choice:
    """The decision, with ties said and broken toward the cheaper profile: **one rule** for every tie member.

    A candidate is *deployable* when its interval lies wholly above 1 (confidently faster than plain decoding) and not
    wholly below 1 + ``margin`` (it may gain what deploying it is worth: a figure confidently under that is the bench's
    *no gain*, the tune's futility stop; two runs of the same tune otherwise chose a 1.03x [1.01, 1.05] in one and
    plain decoding for a 1.00x [0.96, 1.05] in the next). The best is the fastest usable candidate (an interval,
    identical output under the identity rule); its **tie** is every usable candidate whose interval overlaps the
    best's. The cheapest deployable tie member (``kinds.tie_rank``) is served, whether or not the best itself is
    deployable (ngram-mod [1.05, 1.15] beside a wide n8 1.20 [0.97, 1.48]: ngram-mod) and never one that is not
    (ngram-mod 1.02 [1.01, 1.04] beside n8 [1.03, 1.17]: n8). With no deployable tie member plain decoding is served
    (plain decoding in the tie): *settled* when the best cannot gain ``margin`` (its interval lies below 1 + margin)
    and *undecided* otherwise. ``paired(a, b)``: a ÷ b in the same blocks, for the record (the chosen against the
    runner-up). ``left_out``: what could not be compared at all (never in a block with plain decoding), one line
    each, kept in the record."""
    figures = {m.name: m.speedup.fmt() for m in measured}
    usable, left = _usable(measured, need_identical)
    left = [*left_out, *left]
    if not usable:
        why = "; ".join(left) or "nothing measured"
        return Choice(PLAIN, None, f"no candidate could be compared with plain decoding: {why}", figures,
                      settled=not measured, left_out=tuple(left))
    best = max(usable, key=lambda m: m.speedup.estimate)
    tie = [m for m in usable if overlaps(m.speedup, best.speedup)]
    tie.sort(key=lambda m: (kinds.tie_rank(m.name), -m.speedup.estimate))
    names = tuple(m.name for m in tie)
    span = f"{min(float(m.speedup.low or 0) for m in tie):.2f}–{max(float(m.speedup.high or 0) for m in tie):.2f}×"
    small = best.speedup.significantly_below(1.0 + margin)  # confidently under what deploying it is worth
    eligible = [m for m in tie if deployable(m.speedup, margin)]
    if not eligible:
        settled = small
        others = [m for m in usable if m is not best]
        runner = max(others, key=lambda m: m.speedup.estimate).name if others else None
        word = ("nothing pays: the best candidate cannot gain " + f"{margin:.0%}" if settled
                else "undecided: the intervals reach both sides of plain decoding; plain decoding is served until a "
                     "longer measurement settles it")
        return Choice(PLAIN, best.name, f"{word} (best {best.name} {best.speedup.fmt()} against plain decoding, "
                                        f"{best.speedup.n} tasks)",
                      figures, (PLAIN, *names), settled, None, tuple(left))
    chosen = eligible[0]
    rest = [m for m in tie if m is not chosen] or [m for m in usable if m is not chosen]
    runner = max(rest, key=lambda m: m.speedup.estimate).name if rest else None
    reason = f"{chosen.name} {chosen.speedup.fmt()} against plain decoding, {chosen.speedup.n} tasks"
    if len(tie) > 1:
        unproven = [m.name for m in tie if m not in eligible]
        reason += (f"; {', '.join(names)} tie at {span} (their intervals overlap the best's, {best.name} "
                   f"{best.speedup.fmt()}): {chosen.name} chosen, the cheapest"
                   + (" confidently faster than plain decoding by what may pay" if unproven else "")
                   + (f" ({', '.join(unproven)} not: not confidently faster, or confidently under 1 + {margin:.0%})"
                      if unproven else ""))
    pair = paired(chosen.name, runner) if paired and runner else None
    pair_text = f"{chosen.name} ÷ {runner} = {pair.fmt()} paired in the same blocks" if pair else None
    return Choice(chosen.name, runner, reason, figures, names, True, pair_text, tuple(left))
