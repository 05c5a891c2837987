"""**The one chooser** (issue 80 item 3): the decision on a side-by-side measurement's results (what the bench's
results.json holds), from its paired blocks (:mod:`specops.tune.evidence`) by the tune's rule
(:func:`specops.tune.decide.choose`): every measured candidate against the unit's plain decoding with confidence
intervals for the mean speedup, the cheapest deployable tie member (its output passing the identity rule) chosen,
else plain decoding; per workload, what each would prefer. ``specops tune`` chooses by it (:mod:`specops.tune.choose`,
its sixth step) and ``specops bench`` recommends by it (:mod:`specops.bench.recommend`).

The whole figure weighs the workloads by ``--mix`` when given. Without one, over two workloads or more, by **the task
set's own shares** (:func:`planned`; each workload the same for the bench's standard set): the measurement stops a
candidate on a workload where it cannot pay after 3 tasks and runs the others to the end, so pooling every task alike
would weigh a workload by how long it was measured. Where the budget cut a candidate's workload below two tasks the
shares cannot give it an interval: every measured task weighs the same, as before, and the record says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from specops import kinds
from specops.bench import identity as ident
from specops.bench.arms import BASELINE
from specops.bench.stats import Interval
from specops.tune import decide, evidence, mix
from specops.tune.state import TuneError


def identity(results: dict[str, Any], names: list[str], rule: str = "identical") -> dict[str, bool | None]:
    """Per candidate: does its output pass ``rule`` against plain decoding's on every compared request (identical:
    byte for byte; equivalent: every difference explained as a near-tie)? None: not judged."""
    out: dict[str, bool | None] = {}
    for n in names:
        aw = (results.get("summary", {}).get(n) or {}).get("all") or {}
        out[n] = ident.holds(rule if rule in ident.IDENTITY_RULES else "identical", int(aw.get("compared") or 0),
                             int(aw.get("identical") or 0), aw.get("divergences") or [])
    return out


def differences(results: dict[str, Any] | None, names: list[str], rule: str) -> dict[str, dict[str, Any]]:
    """Per measured candidate, what the identity check found (issue 78): the answers checked, the rule's line with
    the bound on the rate it allows, and every difference from plain decoding explained in one line."""
    out: dict[str, dict[str, Any]] = {}
    for n in names:
        aw = (((results or {}).get("summary") or {}).get(n) or {}).get("all") or {}
        compared, divs = int(aw.get("compared") or 0), aw.get("divergences") or []
        if not compared:
            continue
        lines = [(d.get("explained") or {}).get("line") or
                 f"{d.get('task_id')}: output differs from plain decoding's at byte {d.get('byte_pos')} "
                 "(unexplained: no explanation recorded)" for d in divs]
        out[n] = {"checked": compared, "counts": ident.counts(divs),
                  "holds": ident.holds(rule, compared, int(aw.get("identical") or 0), divs)
                  if rule in ident.IDENTITY_RULES else None,
                  "bound": ident.summary_line(rule, compared, divs), "differences": lines}
    return out


@dataclasses.dataclass(frozen=True)
class Decision:
    """The one rule's answer on a measurement (:func:`decision`): every measured candidate's figure against plain
    decoding, the choice over the whole mix, and each workload's own choice (what it would prefer)."""

    measured: list[decide.Measured]
    choice: decide.Choice
    workloads: dict[str, decide.Choice]

    def prefers(self) -> dict[str, str]:
        """Per workload, its choice in one line (the record's ``per_workload``)."""
        return {wl: c.short() for wl, c in self.workloads.items()}


def decision(results: dict[str, Any] | None, shortlisted: list[str], names: list[str], rule: str, margin: float,
             given: dict[str, float] | None = None,
             planned_shares: tuple[dict[str, float] | None, str] = (None, ""), standard: bool = True) -> Decision:
    """**The one chooser** (``specops tune`` and ``specops bench`` both ask it): every measured candidate of ``names``
    against the unit's plain decoding (the bench's baseline under --plain unit), paired in the same blocks, with
    intervals for the mean speedup; the choice from ``shortlisted`` by :func:`specops.tune.decide.choose` under
    ``rule`` (an identity rule: only output that passes it) and ``margin``, and per workload what it would prefer.
    ``given``: a mix (--mix: never falls back); ``planned_shares``: the shares the measurement planned by and how they
    were formed (:func:`planned`; none: the task set's shares from the measurement's plan, ``standard``: each workload
    of the bench's standard set the same)."""
    need = rule in ident.IDENTITY_RULES
    if results is None or not results.get("blocks"):
        return Decision([], decide.choose([], need), {})
    blocks = evidence.Blocks(results["blocks"])
    identical = identity(results, names, rule)
    weights, how = planned_shares
    if given:
        weights, how = given, mix.describe(given)
    elif weights is None:
        counts = {w: int(n) for w, n in ((results.get("plan") or {}).get("workload_counts") or {}).items()}
        weights, how = planned(None, counts, standard=standard)
    if weights and not given:
        weights, how = covered(blocks, names, identical, need, weights, how)
    try:  # over the mix (--mix, or the task set's shares), weighted by time
        measured, _ = blocks.measured(names, BASELINE, identical, mix=weights)
        choice = blocks.decide(shortlisted, BASELINE, need, margin, identical, mix=weights)
    except mix.MixError as exc:
        raise TuneError(f"{exc}; nothing was chosen") from None
    open_lines = settle_note(blocks, results, choice, margin, None, weights)
    per_wl: dict[str, decide.Choice] = {}
    for wl in blocks.workloads:
        per_wl[wl] = c = blocks.decide(shortlisted, BASELINE, need, margin, identical, workload=wl)
        if len(blocks.workloads) > 1:
            open_lines += settle_note(blocks, results, c, margin, wl)
    proj = to_settle(blocks, results, choice, margin, None, weights)
    more = None if proj is None or proj.tasks is None else proj.minutes
    return Decision(measured, dataclasses.replace(choice, settle=tuple(open_lines), weighed=how,
                                                  to_settle_min=None if more is None else round(more, 1),
                                                  to_settle_tasks=None if more is None or proj is None
                                                  or proj.tasks is None else (proj.tasks, proj.held)), per_wl)


def nothing_measured(shortlisted: Sequence[str], choice: decide.Choice,
                     until: str = "a tune with more time") -> decide.Choice:
    """Candidates to choose among, yet none compared with plain decoding: no answer, plain decoding meanwhile
    (undecided), ``until`` settles it; what was left out is kept."""
    return decide.Choice(kinds.PLAIN, None, f"undecided: {', '.join(shortlisted)} shortlisted, none measured "
                         f"against plain decoding within the budget; plain decoding is served until {until} settles "
                         "it", {}, settled=False, left_out=choice.left_out)


def planned(given: dict[str, float] | None, counts: dict[str, int],
            standard: bool = False) -> tuple[dict[str, float] | None, str]:
    """The shares the measurement plans by and the choice weighs by, and how the record says they were formed:
    ``given`` (--mix, normalised; a workload of the task set without a share is said: not measured), else the task
    set's own (``counts``: tasks per workload before any per-workload cap; the bench's standard set, whose files hold
    6 to 15 tasks a workload by accident of their writing, ``standard``: each workload the same). None: no task.

    Without shares the blocks would take turns over the workloads, and early stopping would leave them with unequal
    task counts, so pooling every task alike would weigh a workload by how long it was measured."""
    counts = {w: n for w, n in counts.items() if n > 0}
    if given:
        zero = [w for w in counts if w not in given]
        return dict(given), mix.describe(given) + "".join(f"; {w}: share 0, not measured" for w in zero)
    if not counts:
        return None, mix.describe(None)
    if len(counts) == 1:
        (w, n), = counts.items()
        return {w: 1.0}, (f"no mix given: one workload ({w}, {n} tasks), weighted by time: 1 / its harmonic mean "
                          "ratio")
    listed = ", ".join(f"{w} {n}" for w, n in counts.items())
    how = (f"each workload of the standard set weighs the same (tasks {listed})" if standard
           else f"each workload weighs by its share of the task set ({listed})")
    weights = ({w: 1 / len(counts) for w in counts} if standard
               else {w: n / sum(counts.values()) for w, n in counts.items()})
    return weights, (f"no mix given: {how}, weighted by time: 1 / Σ share ÷ the workload's harmonic mean ratio (a "
                     "workload measured longer weighs no more)")


def covered(blocks: evidence.Blocks, names: list[str], identical: dict[str, bool | None], need_identical: bool,
            weights: dict[str, float], how: str) -> tuple[dict[str, float] | None, str]:
    """The task set's shares where every candidate that can still be chosen has a task of each workload with a
    share; else None (every measured task weighs the same) and why: the budget ended the measurement before it had
    them (a mix, given by the operator, never falls back: such a candidate is left out of its decision)."""
    pooled = mix.describe(None)
    for name in names:
        have = {w: len(ts) for w, ts in blocks.relative_times(name, BASELINE).items()}
        if not have or (need_identical and not identical.get(name)):
            continue  # never paired with plain decoding, or out under the identity rule: it cannot be chosen
        short = [w for w in weights if not have.get(w)]
        if short:
            return None, (f"{pooled}; not the task set's shares: {name} has no task of {', '.join(short)}, the "
                          "measurement ended before it had one")
    return weights, how


@dataclasses.dataclass(frozen=True)
class ToSettle:
    """An undecided figure's projection: the figure, the tasks that would settle it if its estimate and spread held
    (None: not even 500), the measurement's seconds a block and the tasks the task set holds for it."""

    figure: Interval
    tasks: int | None
    per_block_s: float
    held: int

    @property
    def minutes(self) -> float | None:
        """The minutes of measuring more at this host's time a block (None: no projection)."""
        if self.tasks is None or self.per_block_s <= 0:
            return None
        return max(0, self.tasks - self.figure.n) * self.per_block_s / 60


def to_settle(blocks: evidence.Blocks, results: dict[str, Any], c: decide.Choice, margin: float,
              workload: str | None, weights: dict[str, float] | None = None) -> ToSettle | None:
    """For an undecided figure (overall, over ``weights`` when given, or one workload's): its projection
    (:func:`specops.tune.decide.tasks_to_settle`); None when decided or without an interval."""
    if c.settled or c.chosen != kinds.PLAIN or not c.runner_up:
        return None
    fig = (blocks.mix_interval(c.runner_up, BASELINE, weights) if workload is None and weights
           else blocks.interval(c.runner_up, BASELINE, workload))
    if fig is None or not fig.has_ci:
        return None
    counts = (results.get("plan") or {}).get("workload_counts") or {}
    held = int(sum(int(counts.get(w, 0)) for w in (weights or counts)) if workload is None
               else counts.get(workload, 0))
    return ToSettle(fig, decide.tasks_to_settle(fig, margin), block_seconds(results), held)


def settle_note(blocks: evidence.Blocks, results: dict[str, Any], c: decide.Choice, margin: float,
                workload: str | None, weights: dict[str, float] | None = None) -> list[str]:
    """For an undecided figure (:func:`to_settle`): how many tasks would settle it, the minutes at this host's time a
    block, and what to set where the task set holds fewer."""
    proj = to_settle(blocks, results, c, margin, workload, weights)
    if proj is None:
        return []
    fig, k = proj.figure, proj.tasks
    head = (f"{workload or 'overall'}: {c.runner_up} {fig.fmt()} against the unit's plain decoding on {fig.n} tasks "
            "is undecided")
    if k is None:
        return [f"{head}; at its spread, not even 500 tasks would settle it"]
    line = f"{head}; about {k} tasks would settle it if its estimate and spread hold"
    if proj.minutes is not None:
        line += f" (~{proj.minutes:.0f} min more of measuring at {proj.per_block_s:.0f} s a block here)"
    if proj.held and k > proj.held:
        line += (f"; the task set holds {proj.held}: more with --limit-per-workload / "
                 "llama_server_tune_limit_per_workload, or the traffic's own tasks (--tasks / llama_server_tune_tasks)")
    return [line]


def block_seconds(results: dict[str, Any]) -> float:
    """The measurement's seconds a block (0: no block)."""
    outcome = results.get("outcome") or {}
    return float(outcome.get("elapsed_s") or 0) / max(1, int(outcome.get("blocks") or 0))
