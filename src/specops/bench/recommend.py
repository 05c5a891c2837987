"""Pick production settings from the analysed bench, under an explicit rule, behind the A/A gate.

Rules:

* ``equivalent`` (default): only arms whose every difference from their reference was explained as a near-tie
  (:mod:`specops.bench.explain`: plain decoding's top two choices closer than a verifying batch moves them on this
  host) qualify; a change or an unexplained difference disqualifies.
* ``identical``: only arms whose output was byte-identical to their reference on every task of the workload
  qualify. Under either rule the reference must have been identical with itself (baseline vs its A/A
  twin), otherwise identity means nothing.
* ``fastest``: any arm qualifies; the report still shows how many outputs differ.

An arm *wins* a workload only when its whole 95% interval against baseline lies above 1.0 and its gain is
larger than the A/A check's half-width there: a point estimate above 1 inside the noise is not a win. Among
winners the highest estimate is picked; no winner → ``baseline``: the bench never recommends a loser. For
the whole mix (the one setting to deploy) an arm must win the mix **and** be slower on no workload.

**The A/A gate.** The second baseline server measures the baseline against itself. When its interval on
a workload excludes 1.0, or is wider than the effect a recommendation claims, the run cannot tell what it
claims from the machine's noise: the pick for that workload is *invalid* — the bench recommends nothing
and the current setting stays (no inventory variables are written). The whole mix is judged by the A/A
interval over every workload together (the mix's own estimate), each workload by its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specops.bench import identity
from specops.bench.analysis import ALL, ArmWorkload, ref_deterministic
from specops.bench.arms import AA, BASELINE
from specops.bench.design import CONFIDENT, FASTER, SLOWER, rel_half_width
from specops.bench.identity import IDENTITY_RULES

RULES = identity.RULES


@dataclass
class Gate:
    """The A/A check of one workload: may the run's conclusions there be trusted?"""

    valid: bool
    reason: str
    aa: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "aa": self.aa}


@dataclass
class Pick:
    workload: str
    arm: str
    speedup: ArmWorkload | None
    reason: str
    gate: Gate
    confident: bool
    unsettled: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.gate.valid

    def to_dict(self) -> dict[str, Any]:
        sp = self.speedup.speedup if self.speedup else None
        return {
            "workload": self.workload,
            "arm": self.arm if self.valid else None,
            "speedup": sp.to_dict() if sp else None,
            "reason": self.reason,
            "valid": self.valid,
            "gate": self.gate.to_dict(),
            "confident": self.confident,
            "unsettled": self.unsettled,
            "rejected": self.rejected,
        }


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
        return Gate(False, f"the A/A check's half-width (±{hw:.1%}) is wider than the effect claimed "
                           f"({claimed - 1.0:+.1%}): not distinguishable from noise", info)
    return Gate(True, f"A/A {iv.fmt()} (±{hw:.1%})", info)


def _candidates(arm_defs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [name for name, d in arm_defs.items() if d.get("profile", {}).get("spec_type") != "none"]


def _qualifies(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    arm: str,
    wl: str,
    rule: str,
) -> str | None:
    """None if ``arm`` may be picked for ``wl``; else why not."""
    aw = results.get(arm, {}).get(wl)
    if aw is None or aw.speedup is None:
        return "no measurement"
    if rule in IDENTITY_RULES:
        ref = arm_defs.get(arm, {}).get("reference", BASELINE)
        if not identity.holds(rule, aw.compared, aw.identical, aw.divergences):
            return (f"output differs from {ref} on {aw.compared - aw.identical}/{aw.compared} answers "
                    f"(rule {rule}: {identity.summary_line(rule, aw.compared, aw.divergences)})")
        det = ref_deterministic(results, ref, wl)
        if det is False:
            return f"reference {ref} is not deterministic with itself"
        if det is None and ref != arm:
            return f"determinism of reference {ref} not checked"
    if aw.conclusion != FASTER:
        return f"not faster than baseline: {aw.speedup.fmt()} ({aw.conclusion})"
    aa = results.get(AA, {}).get(wl)
    if aa is not None and aa.speedup is not None and rel_half_width(aa.speedup) >= aw.speedup.estimate - 1.0:
        return (f"its gain ({aw.speedup.estimate - 1.0:+.1%}) is within the A/A check's noise "
                f"(±{rel_half_width(aa.speedup):.1%}): not a win this run can tell")
    return None


def pick(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workload: str,
    workloads: list[str],
    rule: str = identity.DEFAULT_RULE,
) -> Pick:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    rejected: dict[str, str] = {}
    winners: list[tuple[float, str]] = []
    for arm in _candidates(arm_defs):
        why = _qualifies(results, arm_defs, arm, workload, rule)
        if why is None and workload == ALL:
            slower = [wl for wl, aw in results.get(arm, {}).items() if wl != ALL and aw.conclusion == SLOWER]
            if slower:
                why = f"slower than baseline on {', '.join(slower)}"
        if why is None:
            winners.append((results[arm][workload].speedup.estimate, arm))  # type: ignore[union-attr]
        elif arm in results:
            rejected[arm] = why
    scope = workloads if workload == ALL else [workload]
    unsettled = {
        f"{arm}/{wl}": f"{aw.conclusion}: {aw.speedup.fmt() if aw.speedup else '–'}"
        + (f", stopped: {aw.stopped}" if aw.stopped else "")
        for arm in _candidates(arm_defs)
        for wl in scope
        if (aw := results.get(arm, {}).get(wl)) is not None and aw.conclusion not in CONFIDENT
    }
    confident = not unsettled
    if winners:
        winners.sort(reverse=True)
        best = winners[0][1]
        aw = results[best][workload]
        assert aw.speedup is not None
        gate = aa_gate(results, workload, aw.speedup.estimate)
        if not gate.valid:
            return Pick(workload, best, aw, f"{best} measured {aw.speedup.fmt()}, but the run is invalid here: "
                        f"{gate.reason}. Nothing is recommended; keep the current setting.", gate, confident,
                        unsettled, rejected)
        return Pick(workload, best, aw, f"fastest qualifying arm under rule '{rule}': {aw.speedup.fmt()}",
                    gate, confident, unsettled, rejected)
    gate = aa_gate(results, workload, None)
    if not gate.valid:
        return Pick(workload, BASELINE, results.get(BASELINE, {}).get(workload),
                    f"the run is invalid here: {gate.reason}. Nothing is recommended; keep the current setting.",
                    gate, confident, unsettled, rejected)
    why = f"no arm is faster than baseline with 95% confidence under rule '{rule}'"
    if not confident:
        why += f"; {len(unsettled)} conclusion(s) unsettled (budget or tasks ran out), so baseline is the safe pick"
    return Pick(workload, BASELINE, results.get(BASELINE, {}).get(workload), why, gate, confident, unsettled,
                rejected)


def recommend(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workloads: list[str],
    rule: str = identity.DEFAULT_RULE,
) -> dict[str, Pick]:
    """A pick per workload and one for the whole mix (key ``all``), the one to deploy."""
    return {wl: pick(results, arm_defs, wl, workloads, rule) for wl in [*workloads, ALL]}
