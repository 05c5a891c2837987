"""Pick production settings from the analysed bench, under an explicit rule.

Rules:

* ``identical`` (default): only arms whose output was byte-identical to their reference on every
  task of the workload, in every repetition, qualify; and the reference must have been identical
  with itself (baseline vs baseline-again / across repetitions), otherwise identity means nothing.
* ``fastest``: any arm qualifies; the report still shows how many outputs differ.

An arm *wins* a workload only when the lower end of its 95% speedup interval is above 1.0: a
point estimate above 1 inside the noise is not a win. Among winners the highest estimate is picked.
No winner → ``baseline``: the bench never recommends a loser. For the deployed service (one
setting for the whole mix) an arm must win on all tasks together **and** not be significantly slower
than baseline on any workload (upper end of its interval ≥ 1.0 everywhere).
Only server arms that a service can run are candidates (not the CLI cross-check, not baselines).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specops.bench.analysis import ALL, ArmWorkload, ref_deterministic
from specops.bench.arms import BASELINE

RULES = ("identical", "fastest")


@dataclass
class Pick:
    workload: str
    arm: str
    speedup: ArmWorkload | None
    reason: str
    rejected: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        sp = self.speedup.speedup if self.speedup else None
        return {
            "workload": self.workload,
            "arm": self.arm,
            "speedup": sp.to_dict() if sp else None,
            "reason": self.reason,
            "rejected": self.rejected,
        }


def _candidates(arm_defs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [
        name
        for name, d in arm_defs.items()
        if d.get("kind", "server") == "server" and d.get("profile", {}).get("spec_type") != "none"
    ]


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
    if rule == "identical":
        ref = arm_defs.get(arm, {}).get("reference", BASELINE)
        if not aw.all_identical:
            return f"output differs from {ref} on {aw.compared - aw.identical}/{aw.compared} runs"
        det = ref_deterministic(results, ref, wl)
        if det is False:
            return f"reference {ref} is not deterministic with itself"
        if det is None and ref != arm:
            return f"determinism of reference {ref} not checked (run it twice)"
    if not aw.speedup.has_ci:
        return f"speedup {aw.speedup.estimate:.2f}× has no confidence interval (too few tasks)"
    if not aw.speedup.significantly_above(1.0):
        return f"not faster than baseline: {aw.speedup.fmt()}"
    return None


def pick(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workload: str,
    rule: str = "identical",
) -> Pick:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    rejected: dict[str, str] = {}
    winners: list[tuple[float, str]] = []
    for arm in _candidates(arm_defs):
        why = _qualifies(results, arm_defs, arm, workload, rule)
        if why is None and workload == ALL:
            slower = [
                wl
                for wl, aw in results.get(arm, {}).items()
                if wl != ALL and aw.speedup is not None and aw.speedup.significantly_below(1.0)
            ]
            if slower:
                why = f"significantly slower than baseline on {', '.join(slower)}"
        if why is None:
            winners.append((results[arm][workload].speedup.estimate, arm))  # type: ignore[union-attr]
        else:
            rejected[arm] = why
    if not winners:
        return Pick(
            workload,
            BASELINE,
            results.get(BASELINE, {}).get(workload),
            f"no arm is faster than baseline with 95% confidence under rule '{rule}'",
            rejected,
        )
    winners.sort(reverse=True)
    best = winners[0][1]
    aw = results[best][workload]
    assert aw.speedup is not None
    return Pick(workload, best, aw, f"fastest qualifying arm under rule '{rule}': {aw.speedup.fmt()}", rejected)


def recommend(
    results: Mapping[str, Mapping[str, ArmWorkload]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workloads: list[str],
    rule: str = "identical",
) -> dict[str, Pick]:
    """A pick per workload and one for the whole mix (key ``all``), the one to deploy."""
    return {wl: pick(results, arm_defs, wl, rule) for wl in [*workloads, ALL]}
