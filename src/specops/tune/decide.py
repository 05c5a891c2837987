"""The tune's decisions, apart from any server: which candidates may pay, which to measure, which to deploy.

1. **Predict** every candidate from the host's step costs (llama-bench), the server's overheads (a plain run and
   the probes, :mod:`specops.bench.costmodel`) and the acceptance the probes saw: a draft-model length k from
   the longest probe's per-position counters (a shorter greedy draft is a prefix of the longer one), an n-gram
   type or llama.cpp's ``default`` from its own probe's counters.
2. **Shortlist** the best few whose prediction clears plain decoding by a margin; a candidate that cannot be
   predicted (no probe) is measured only if room is left.
3. **Choose** from the side-by-side measurement against plain decoding: the cheapest deployable candidate the
   paired ratios (in the same blocks) cannot tell slower than the fastest (and, under the identity rule, whose output
   was identical to plain decoding's), else plain decoding; the runner-up is kept for the record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops import kinds
from specops.bench import ceiling as ceil
from specops.bench.arms import ArmError, parse_arm
from specops.bench.costmodel import (
    Overheads,
    Run,
    StepCosts,
    expected_accepted,
    predicted_run_speedup,
    predicted_speedup,
    survival,
)
from specops.bench.stats import Interval, t975, t_quantile
from specops.bench.verdict import (
    ALPHA,
    at_level,
    budget_shares,
    deployable,
    look_level,
    recycled,
    shown_to_pay,
)
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
    a ratio toward 1), the bench's ceiling (:func:`specops.bench.ceiling.perfect_ceiling`, the one figure both prune
    by) on the step costs. Below the margin for every length (:func:`specops.bench.ceiling.pays`), no acceptance can
    pay on this host and the draft model's probes are not worth their minutes (on a 2-core CPU the longest draft
    probe alone took ~45 s)."""
    r = costs.draft_step_s / costs.target_step_s if costs.draft_step_s else 0.0
    return {k: ceil.perfect_ceiling(costs.target_rel, k, r, costs.draft_rel) for k in lengths}


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


def interval_df(iv: Interval) -> int:
    """The degrees of freedom of the t quantile that built ``iv``: its own where the builder records them (``df``: a
    mix's n − K or Welch–Satterthwaite's, :mod:`specops.bench.weighted`), else n − 1 (a t-interval on the per-task log
    ratios, :func:`specops.bench.stats.geomean_ratio_ci`)."""
    df = iv.df
    return int(df) if df is not None else iv.n - 1


def interval_level(iv: Interval) -> float:
    """The confidence level that built ``iv``: its own where the builder records it (``level``), else 95%."""
    level = iv.level
    return float(level) if level is not None else 0.95


def spread(iv: Interval, df: int | None = None, level: float | None = None) -> float | None:
    """The per-task spread s on the log scale that ``iv`` was built from: its half-width is t·s/√n, t the two-sided
    ``level`` quantile at ``df`` degrees of freedom, so s is worked back out with **the same** t (``df``, ``level``:
    the builder's, :func:`interval_df` and :func:`interval_level` by default). For a mix's interval s² is n·Var(log S)
    (the pooled s²_p where the shares follow the task counts). None: no interval or no degrees of freedom."""
    dof = interval_df(iv) if df is None else df
    if not iv.has_ci or iv.n < 1 or dof < 1 or iv.low is None or iv.high is None or iv.low <= 0:
        return None
    half = (math.log(iv.high) - math.log(iv.low)) / 2
    return half * math.sqrt(iv.n) / t_quantile(interval_level(iv) if level is None else level, dof)


def tasks_to_settle(iv: Interval, margin: float, most: int = 500, df: int | None = None,
                    level: float | None = None, serve: float | None = None) -> int | None:
    """The tasks an undecided figure like ``iv`` would need to settle if its estimate and the tasks' spread held as
    measured: its half-width on the log scale, t·s/√n, below the distance to 1 (confidently faster, at ``serve``: the
    level the choice serves at, issue 79 item 1; None: :func:`specops.bench.design.look_level` of one candidate, the
    least strict) or to 1 + ``margin`` (confidently unable to gain it, at 95%), whichever comes first (at least half
    of log(1 + margin) away: every estimate settles at some size). The spread s is worked back out of ``iv`` with the
    quantile that built it (:func:`spread`: ``df`` and ``level``, the builder's by default; issue 79 item 5: a mix's
    interval at n − K degrees of freedom read back at n − 1 overstated s, and the tasks it needed), and n tasks ahead
    carry as many degrees of freedom fewer than n as ``iv``'s do (n − 1, or a mix's). None: no interval (fewer than
    two tasks), or not within ``most`` tasks."""
    dof = interval_df(iv) if df is None else df
    if not iv.has_ci or iv.n < 2 or iv.estimate <= 0 or dof < 1:
        return None
    s = spread(iv, dof, level)
    if s is None:
        return None
    up, down = math.log(iv.estimate), math.log(1 + margin) - math.log(iv.estimate)
    if max(up, down) <= 0:
        return None
    at = look_level(1) if serve is None else serve
    lost = iv.n - dof  # the degrees of freedom the builder spends besides the tasks (1, or K for a mix)

    def settles(n: int) -> bool:
        se = s / math.sqrt(n)
        return t_quantile(at, n - lost) * se < up or t975(n - lost) * se < down

    return next((n for n in range(max(2, iv.n, lost + 1), most + 1) if settles(n)), None)


@dataclass(frozen=True)
class Choice:
    chosen: str  # a candidate's name, or "plain"
    runner_up: str | None
    reason: str
    figures: Mapping[str, str]
    tie: tuple[str, ...] = ()  # what the data cannot tell slower than the best (plain included), cheapest first
    settled: bool = True  # False: undecided (plain decoding served, the figures could not settle it)
    paired: str | None = None  # the chosen ÷ the runner-up, paired in the same blocks
    left_out: tuple[str, ...] = ()  # measured but out of the decision, one line each
    settle: tuple[str, ...] = ()  # for what stayed undecided (overall, per workload): the tasks that would settle it
    weighed: str = ""  # how the whole figure weighs the workloads, for the record ('' : as --mix says)
    to_settle_min: float | None = None  # undecided: the minutes of measuring more that would settle the whole figure
    pairs: tuple[str, ...] = ()  # held-back types measured beside a shortlisted one: their paired ratios
    to_settle_tasks: tuple[int, int] | None = None  # undecided: (the tasks that would settle it, the task set's)
    level: float | None = None  # the level "confidently faster" was read at (the run's error budget, issue 79)

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
                "to_settle_tasks": list(self.to_settle_tasks) if self.to_settle_tasks else None,
                "level": self.level}


def tie_rank(name: str) -> tuple[int, int, int]:
    """How much a profile costs to serve, for breaking ties: :func:`specops.kinds.tie_rank` for a tune candidate; for
    another of the bench's arms (``draft-n8-p0.5``, ``draft-q4_0-n4``, ``ngram-mod-n8``: ``specops bench`` chooses by
    this rule too) the same order read off its profile: the kind's tier (nothing loaded beside the target, the
    target's MTP head, that head with an n-gram type, a draft model), the shorter draft, llama.cpp's own default type
    first; an arm the bench cannot name last."""
    if kinds.claims(name):
        return kinds.tie_rank(name)
    try:
        arm = parse_arm(name)
    except ArmError:
        return (len(kinds.KINDS), 0, 1)
    spec = str(arm.profile.get("spec_type", "none"))
    kind = next((k for k in kinds.KINDS if k.spec_type == spec), None)  # a kind's type, a type list included
    if kind is None and kinds.claims(spec):
        kind = kinds.of(spec)  # an n-gram type: its kind
    default = 0 if set(spec.split(",")) & kinds.ENGINE_DEFAULT_TYPES else 1
    return (kind.tier if kind else len(kinds.KINDS), int(arm.profile.get("draft_n_max") or 0), default)


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


@dataclass(frozen=True)
class _Tie:
    """The best of a pool and what the data cannot tell from it, cheapest first; the lines that say who the paired
    ratio kept out, and the members judged without one (by their intervals against plain decoding)."""

    best: Measured
    members: tuple[Measured, ...]
    out: tuple[str, ...] = ()
    unpaired: tuple[str, ...] = ()


def _tie(pool: Sequence[Measured], paired: Callable[[str, str], Interval | None] | None,
         margin: float = 0.0) -> _Tie:
    """The fastest of ``pool`` and its tie: each other candidate m whose paired ratio m ÷ best (same blocks) does not
    lie wholly below 1 and whose estimate is within ``margin`` of the best (m ÷ best ≥ 1 ÷ (1 + margin): the best is
    not measured to gain what deploying it is worth over m), or, where the two never shared a block (no paired
    interval), whose interval against plain decoding overlaps the best's."""
    best = max(pool, key=lambda m: m.speedup.estimate)
    members: list[Measured] = []
    out: list[str] = []
    unpaired: list[str] = []
    for m in pool:
        if m is best:
            members.append(m)
            continue
        pair = paired(m.name, best.name) if paired else None
        if pair is not None and pair.has_ci:
            if pair.significantly_below(1.0):
                out.append(f"{m.name} out of the tie: {m.name} ÷ {best.name} = {pair.fmt()} paired in the same blocks")
            elif pair.estimate < 1 / (1 + margin):
                out.append(f"{m.name} out of the tie: {m.name} ÷ {best.name} = {pair.fmt()} paired in the same "
                           f"blocks, {best.name} measured ahead by more than {margin:.0%}, what a profile must "
                           "gain to be worth deploying")
            else:
                members.append(m)
        elif overlaps(m.speedup, best.speedup):
            members.append(m)
            unpaired.append(m.name)
    members.sort(key=lambda m: (tie_rank(m.name), -m.speedup.estimate))
    return _Tie(best, tuple(members), tuple(out), tuple(unpaired))


def _unpaired_words(t: _Tie) -> str:
    """The tie members judged without a paired ratio (never in a block with the best), for the reason."""
    if not t.unpaired:
        return ""
    return (f"{', '.join(t.unpaired)} in the tie by {'its' if len(t.unpaired) == 1 else 'their'} interval against "
            f"plain decoding overlapping {t.best.name}'s (no paired ratio with it in the same blocks)")


def budget_words(level: float, candidates: int, share: float = 1.0) -> str:
    """How the serving level was set, for the reason: ``98.00% (the run's one-sided 2.5% for serving what does not
    pay, over 1 candidate, O'Brien–Fleming's boundary at its last look)``; with several candidates, the share of the
    budget the level was read at (:func:`specops.bench.verdict.budget_shares`, passed on by those shown to pay)."""
    part = "" if candidates == 1 else f", {share:.0%} of it here"
    return (f"{level:.2%} (the run's one-sided {ALPHA:.1%} for serving what does not pay, over {candidates} "
            f"candidate{'s' if candidates != 1 else ''}{part}, O'Brien–Fleming's boundary at its last look)")


def serving_levels(measured: Sequence[Measured], margin: float,
                   level: float | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """The level each of ``measured`` is read at to be served, and the share of the budget behind it: ``level``
    for every one where given; else the run's error budget shared over them in their order
    (:func:`specops.bench.verdict.budget_shares`), a candidate confidently faster at its share's level passing that
    share on to the others (:func:`specops.bench.verdict.shown_to_pay`): each shown at the share it was shown at, the
    others at theirs once no more pays."""
    names = [m.name for m in measured]
    if level is not None:
        return dict.fromkeys(names, level), dict.fromkeys(names, 1.0 / max(1, len(names)))
    given = budget_shares(names)
    by = {m.name: m for m in measured}
    shown = shown_to_pay(given, lambda n, lvl: deployable(by[n].speedup, margin, lvl))
    now = {**recycled(given, shown), **shown}  # the shown at the share they were shown at
    return {n: look_level(now[n]) for n in names}, now


def choose(measured: Sequence[Measured], need_identical: bool = True, margin: float = 0.05,
           paired: Callable[[str, str], Interval | None] | None = None, left_out: Sequence[str] = (),
           level: float | None = None) -> Choice:
    """The decision, with ties said and broken toward the cheaper profile: **one rule** for every tie member.

    A candidate is *deployable* when its interval lies wholly above 1 (confidently faster than plain decoding) at
    its serving level and not wholly below 1 + ``margin`` at 95%. The serving level is ``level`` where given, else the
    run's **error budget** (issue 79 item 1; :func:`serving_levels`: one-sided 2.5% for serving what does not pay over
    the whole run, shared over the ``measured`` in their order, passed on by those shown to pay, the last look of an
    O'Brien–Fleming boundary); the figures shown stay the 95% ones. Not
    wholly below 1 + ``margin`` (it may gain what deploying it is worth: a figure confidently under that is the bench's
    *no gain*, the tune's futility stop; two runs of the same tune otherwise chose a 1.03x [1.01, 1.05] in one and plain
    decoding for a 1.00x [0.96, 1.05] in the next). The best is the fastest usable candidate (an interval, identical
    output under the identity rule); its **tie** is every usable candidate the data cannot tell slower than the best:
    its **paired** ratio to the best, ``paired(m, best)`` (m ÷ best in the same blocks, issue 79 item 2), does not lie
    wholly below 1 and its estimate is within ``margin`` of the best's (m ÷ best ≥ 1 ÷ (1 + margin): a best measured
    more than ``margin`` ahead, what a profile must gain to be worth deploying, is not traded for a cheaper one the data
    merely cannot rule equal; on the audit's case with n8's own spread at sd 0.20 this serves n8 in 92% of the runs that
    serve a candidate, 83% without it; two candidates truly equal at that spread serve the dearer in 15% of runs, 2%
    without it); where the two never shared a block (no paired interval) its interval against plain decoding overlaps
    the best's, and the reason says so. Two intervals against plain decoding both carry the tasks' spread and plain
    decoding's noise, which the paired ratio cancels: ngram-mod 1.08× beside n8 1.30× on the same 12 tasks overlapped,
    and ngram-mod was served in 22% of runs while n8 ÷ ngram-mod lay wholly above 1 in every one. The cheapest
    deployable tie member (:func:`tie_rank`) is served, whether or not the best itself is deployable (ngram-mod [1.05,
    1.15] beside a wide n8 1.20 [0.97, 1.48]: ngram-mod) and never one that is not (ngram-mod 1.02 [1.01, 1.04] beside
    n8 [1.03, 1.17]: n8). Where the tie has no deployable member but a candidate the paired ratio kept out of it is
    deployable (confidently faster than plain decoding, the best paired faster still but not confidently faster than
    plain decoding itself), the rule is read again without the best's tie: the cheapest deployable member of the next
    best's tie is served, never plain decoding while a candidate is deployable. With no deployable candidate plain
    decoding is served (plain decoding in the tie): *settled* when the best cannot gain ``margin`` (its interval lies
    below 1 + margin) and *undecided* otherwise. The record keeps ``paired`` of the chosen against the runner-up.
    ``left_out``: what could not be compared at all (never in a block with plain decoding), one line each, kept in the
    record."""
    levels, shares = serving_levels(measured, margin, level)

    def at(m: Measured) -> float:
        return levels[m.name]

    def budget(m: Measured) -> str:
        return budget_words(at(m), len(measured), shares[m.name])

    def pays(m: Measured) -> bool:
        return deployable(m.speedup, margin, at(m))

    figures = {m.name: m.speedup.fmt() for m in measured}
    usable, left = _usable(measured, need_identical)
    left = [*left_out, *left]
    if not usable:
        why = "; ".join(left) or "nothing measured"
        return Choice(PLAIN, None, f"no candidate could be compared with plain decoding: {why}", figures,
                      settled=not measured, left_out=tuple(left), level=at(measured[0]) if measured else look_level())
    first = _tie(usable, paired, margin)
    best = first.best
    ties = [first]
    while not any(pays(m) for m in ties[-1].members):
        rest = [m for m in usable if all(m not in t.members for t in ties)]
        if not any(pays(m) for m in rest):
            break
        ties.append(_tie(rest, paired, margin))
    tie = list(ties[-1].members)
    names = tuple(m.name for m in tie)
    small = best.speedup.significantly_below(1.0 + margin)  # confidently under what deploying it is worth
    eligible = [m for m in tie if pays(m)]
    if not eligible:
        settled = small
        word = ("nothing pays: the best candidate cannot gain " + f"{margin:.0%}" if settled
                else f"undecided: the intervals reach both sides of plain decoding at {budget(best)}; plain decoding "
                     "is served until a longer measurement settles it")
        how = "; ".join(w for w in (*first.out, _unpaired_words(first)) if w)
        return Choice(PLAIN, best.name, f"{word} (best {best.name} {best.speedup.fmt()} against plain decoding, "
                                        f"{best.speedup.n} tasks; {at_level(best.speedup, at(best)).fmt()} at "
                                        f"{at(best):.2%})" + (f"; {how}" if how else ""),
                      figures, (PLAIN, *names), settled, None, tuple(left), level=at(best))
    chosen = eligible[0]
    rest = [m for m in tie if m is not chosen] or [m for m in usable if m is not chosen]
    runner = max(rest, key=lambda m: m.speedup.estimate).name if rest else None
    reason = _chosen_reason(chosen, ties, eligible, best, at(chosen), budget(chosen), margin)
    pair = paired(chosen.name, runner) if paired and runner else None
    pair_text = f"{chosen.name} ÷ {runner} = {pair.fmt()} paired in the same blocks" if pair else None
    return Choice(chosen.name, runner, reason, figures, names, True, pair_text, tuple(left), level=at(chosen))


def _chosen_reason(chosen: Measured, ties: Sequence[_Tie], eligible: Sequence[Measured], best: Measured,
                   level: float, budget: str, margin: float) -> str:
    """Why ``chosen`` is served: its figure at the run's level, the tie it was the cheapest paying member of, and
    who the paired ratios kept out."""
    lead = ties[-1].best
    tie = list(ties[-1].members)
    names = tuple(m.name for m in tie)
    reason = (f"{chosen.name} {chosen.speedup.fmt()} against plain decoding, {chosen.speedup.n} tasks; "
              f"{at_level(chosen.speedup, level).fmt()} at {budget}")
    if len(ties) > 1:
        above = ", ".join(m.name for t in ties[:-1] for m in t.members)
        reason += (f"; no member of {best.name}'s tie ({above}) is confidently faster than plain decoding by what "
                   f"may pay: {lead.name}'s tie, kept out of {best.name}'s by the paired ratio yet confidently "
                   "faster than plain decoding, is served")
    if len(tie) > 1:
        span = f"{min(float(m.speedup.low or 0) for m in tie):.2f}–{max(float(m.speedup.high or 0) for m in tie):.2f}×"
        unproven = [m.name for m in tie if m not in eligible]
        judged = (f"their intervals against plain decoding overlap the best's, {lead.name} {lead.speedup.fmt()}"
                  if len(ties[-1].unpaired) == len(tie) - 1 else
                  f"none is confidently slower than the best, {lead.name} {lead.speedup.fmt()}, paired in the same "
                  "blocks")
        reason += (f"; {', '.join(names)} tie at {span} ({judged}): {chosen.name} chosen, the cheapest"
                   + (" confidently faster than plain decoding by what may pay" if unproven else "")
                   + (f" ({', '.join(unproven)} not: not confidently faster, or confidently under 1 + {margin:.0%})"
                      if unproven else ""))
    how = "; ".join(w for t in ties for w in (*t.out, _unpaired_words(t)) if w)
    return f"{reason}; {how}" if how else reason
