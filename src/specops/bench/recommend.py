"""What ``specops bench`` recommends: **the tune's choice** (:func:`specops.tune.rule.decision`, the one chooser)
read on the bench's blocks, with the A/A check beside it.

The rule (:func:`specops.tune.decide.choose`): every speculative arm against the baseline (plain decoding: the unit's
under ``--plain unit``), paired in the same blocks, the whole figure weighted by time over the workloads
(``--shares`` as the mix; else the task set's shares, each workload of the standard set the same). An arm is
*deployable* when its interval lies wholly above 1.0 at the run's error budget (one-sided 2.5% over the arms measured)
and not wholly below 1 + ``--half-width`` (what deploying it is worth). The cheapest deployable member of the best
arm's tie (what the paired ratio cannot tell slower than the best) is chosen, else the baseline: *settled* when the
best cannot gain the margin, *undecided* otherwise. Under an identity rule (``equivalent``, the default: every
difference from the arm's reference explained as a near-tie; ``identical``: byte for byte) an arm whose output fails
it is out of the decision; ``fastest`` judges no output. Each workload is read by the same rule on its own blocks.

**The A/A check guards what is applied.** The second baseline server measures the baseline against itself. When its
interval on a workload excludes 1.0, or is wider than the effect chosen there, the run cannot tell that effect from
the machine's noise: the choice is still said, but it is *not valid to apply* (no inventory variables are written and
``--apply`` refuses; the current setting stays). The whole mix is judged by the A/A interval over every workload,
each workload by its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specops.bench import identity
from specops.bench.analysis import ALL, ArmWorkload
from specops.bench.arms import AA, BASELINE
from specops.bench.design import rel_half_width
from specops.bench.tasks import STANDARD_SET
from specops.kinds import PLAIN
from specops.tune import decide
from specops.tune import rule as one_rule
from specops.tune.state import TuneError

RULES = identity.RULES


@dataclass
class Gate:
    """The A/A check of one workload: may the run's choice there be applied?"""

    valid: bool
    reason: str
    aa: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "aa": self.aa}


@dataclass
class Pick:
    """The rule's choice for one workload (or the whole mix, ``all``), the A/A check beside it, and the arms the rule
    left out of the decision (why, one line each)."""

    workload: str
    choice: decide.Choice
    gate: Gate
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def arm(self) -> str:
        """The arm chosen (the baseline where the rule serves plain decoding)."""
        return BASELINE if self.choice.chosen == PLAIN else self.choice.chosen

    @property
    def valid(self) -> bool:
        return self.gate.valid

    @property
    def confident(self) -> bool:
        return self.choice.settled

    @property
    def reason(self) -> str:
        return self.choice.reason

    @property
    def figure(self) -> str:
        """The chosen arm's figure against the baseline; for the baseline, the best arm's."""
        c = self.choice
        if c.chosen != PLAIN:
            return c.figures.get(c.chosen, "–")
        return f"best {c.runner_up} {c.figures.get(c.runner_up, '')}".strip() if c.runner_up else "–"

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "arm": self.arm, "figure": self.figure, "reason": self.reason,
                "valid": self.valid, "gate": self.gate.to_dict(), "confident": self.confident,
                "rejected": self.rejected, "choice": self.choice.to_dict()}


def aa_gate(results: Mapping[str, Mapping[str, ArmWorkload]], wl: str, claimed: float | None) -> Gate:
    """Is the A/A check of ``wl`` sound, and narrower than the effect ``claimed`` (an estimate vs 1.0)?"""
    aw = results.get(AA, {}).get(wl)
    iv = aw.speedup if aw else None
    if iv is None or not iv.has_ci:
        return Gate(False, "the A/A check has no interval on this workload (fewer than two tasks ran)")
    info = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n": iv.n, "half_width": rel_half_width(iv)}
    if iv.significantly_below(1.0) or iv.significantly_above(1.0):
        return Gate(False, f"baseline-again measured {iv.fmt()} against baseline: this run cannot tell the "
                           "baseline from itself", info)
    hw = rel_half_width(iv)
    if claimed is not None and hw > abs(claimed - 1.0):
        return Gate(False, f"the A/A check's half-width (±{hw:.1%}) is wider than the effect chosen "
                           f"({claimed - 1.0:+.1%}): not distinguishable from noise", info)
    return Gate(True, f"A/A {iv.fmt()} (±{hw:.1%})", info)


def candidates(plan: Mapping[str, Any]) -> list[str]:
    """The speculative arms the run measured (an identity reference such as ``exact-baseline`` is none)."""
    defs = {a["name"]: a for a in plan.get("arm_defs") or ()}
    return [a for a in (plan.get("design") or {}).get("arms") or ()
            if (defs.get(a) or {}).get("profile", {}).get("spec_type") != "none"]


def decision(raw: Mapping[str, Any], rule: str) -> one_rule.Decision:
    """The one rule on the bench's results (what results.json holds: the plan, the blocks, the identity summary):
    ``--shares`` as the mix, ``--half-width`` as the margin; arms that ran, none compared with the baseline:
    undecided."""
    plan = raw.get("plan") or {}
    dz = plan.get("design") or {}
    names = candidates(plan)
    shares = {w: float(v) for w, v in (dz.get("shares") or {}).items() if float(v) > 0} or None
    try:
        d = one_rule.decision(dict(raw), names, names, rule, float(dz.get("half_width", 0.05)), shares,
                              standard=plan.get("task_set") == STANDARD_SET)
    except TuneError as exc:
        return one_rule.Decision([], decide.Choice(PLAIN, None, f"undecided: {exc}", {}, settled=False), {})
    if names and not d.measured:
        return dataclasses.replace(d, choice=one_rule.nothing_measured(names, d.choice, "a run with more time"))
    return d


def _rejected(choice: decide.Choice, bounds: Mapping[str, Mapping[str, Any]], rule: str) -> dict[str, str]:
    """The arms out of the decision, why: what the rule said, with what the identity check found where the arm's
    output fails the rule (whichever reason the rule read first)."""
    out: dict[str, str] = {}
    for line in choice.left_out:
        name, _, why = line.partition(": ")
        found = bounds.get(name) or {}
        if found.get("holds") is False:
            why = (why if "output differs" in why else f"{why}; its output differs from its reference's too") + (
                f" (rule {rule}: {found.get('bound')})")
        out[name] = why
    return out


def recommend(raw: Mapping[str, Any], results: Mapping[str, Mapping[str, ArmWorkload]], workloads: list[str],
              rule: str = identity.DEFAULT_RULE, decided: one_rule.Decision | None = None) -> dict[str, Pick]:
    """A pick per workload and one for the whole mix (key ``all``, the one to deploy): ``decided`` (the tune's, for
    the report of its own measurement) or the rule read here (:func:`decision`), each with its A/A check."""
    d = decided if decided is not None else decision(raw, rule)
    bounds = one_rule.differences(dict(raw), candidates(raw.get("plan") or {}), rule)
    picks: dict[str, Pick] = {}
    for wl in [*workloads, ALL]:
        c = d.choice if wl == ALL else d.workloads.get(wl)
        if c is None:
            c = decide.Choice(PLAIN, None, "no block of this workload compared an arm with the baseline", {},
                              settled=False)
        aw = results.get(c.chosen, {}).get(wl) if c.chosen != PLAIN else None
        claimed = aw.speedup.estimate if aw is not None and aw.speedup is not None else None
        picks[wl] = Pick(wl, c, aa_gate(results, wl, claimed), _rejected(c, bounds, rule))
    return picks
