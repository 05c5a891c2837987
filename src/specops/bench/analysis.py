"""Turn stored arm-repetitions into per-arm, per-workload numbers (the report's tables)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specops.bench import ceiling as ceil
from specops.bench import identity
from specops.bench.arms import BASELINE
from specops.bench.stats import Interval, mean, speedup

ALL = "all"


@dataclass
class ArmWorkload:
    """Numbers of one arm on one workload (or ``all``)."""

    arm: str
    workload: str
    requests: int = 0
    tokens: int = 0
    decode_tps: float | None = None
    wall_decode_tps: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    acceptance: float | None = None
    mean_accept_len: float | None = None
    mean_draft_len: float | None = None
    speedup: Interval | None = None
    wall_speedup: Interval | None = None
    predicted: float | None = None
    ceiling: float | None = None
    identical: int = 0
    compared: int = 0
    divergences: list[dict[str, Any]] = field(default_factory=list)
    per_pos: dict[str, float] = field(default_factory=dict)
    drafts: float = 0.0
    rss_peak: int = 0

    @property
    def all_identical(self) -> bool:
        return self.compared > 0 and self.identical == self.compared

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["speedup"] = self.speedup.to_dict() if self.speedup else None
        d["wall_speedup"] = self.wall_speedup.to_dict() if self.wall_speedup else None
        d["all_identical"] = self.all_identical
        return d


def _avg(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return mean(vals) if vals else None


def _by_task(reqs: list[dict[str, Any]], key: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in reqs:
        v = r.get(key)
        if v:
            out.setdefault(r["task"], []).append(float(v))
    return out


def _texts(reps: Mapping[int, Mapping[str, Any]], workload: str) -> dict[int, dict[str, str]]:
    return {
        rep: {
            r["task"]: r.get("text", "")
            for r in rec.get("requests", [])
            if (workload == ALL or r["workload"] == workload) and r.get("text_exact", True)
        }
        for rep, rec in reps.items()
    }


def analyse(
    data: Mapping[str, Mapping[int, Mapping[str, Any]]],
    arm_defs: Mapping[str, Mapping[str, Any]],
    workloads: list[str],
    ceiling: Mapping[str, Any] | None,
) -> dict[str, dict[str, ArmWorkload]]:
    """``{arm: {workload: ArmWorkload}}`` for every arm with data (``workload`` includes ``all``)."""
    base = data.get(BASELINE, {})
    out: dict[str, dict[str, ArmWorkload]] = {}
    for arm, reps in data.items():
        adef = arm_defs.get(arm, {})
        ref_name = adef.get("reference", BASELINE)
        ref_reps = data.get(ref_name, {})
        numerics = ceil.Numerics.of_profile(adef.get("profile", {}), adef.get("env", {})).name
        rel = ceil.relative_for(ceiling, numerics) if ceiling else None
        if adef.get("draft") is None:
            r_cost = 0.0  # n-gram arms: drafting is a table lookup
        else:
            r_cost = ceil.draft_cost_ratio(ceiling, adef.get("draft"), numerics) if ceiling else float("nan")
        out[arm] = {}
        for wl in [*workloads, ALL]:
            reqs = [r for rec in reps.values() for r in rec.get("requests", []) if wl == ALL or r["workload"] == wl]
            if not reqs:
                continue
            aw = ArmWorkload(arm, wl, requests=len(reqs))
            aw.rss_peak = max(int((rec.get("rss") or {}).get("peak") or 0) for rec in reps.values())
            aw.tokens = sum(int(r.get("n_predicted") or 0) for r in reqs)
            aw.decode_tps = _avg([r.get("decode_tps") for r in reqs])
            aw.wall_decode_tps = _avg([r.get("wall_decode_tps") for r in reqs])
            aw.ttft_s = _avg([r.get("ttft_s") for r in reqs])
            aw.e2e_s = _avg([r.get("e2e_s") for r in reqs])
            dn = sum(int((r.get("timings") or {}).get("draft_n") or 0) for r in reqs)
            da = sum(int((r.get("timings") or {}).get("draft_n_accepted") or 0) for r in reqs)
            drafts = sum(float((r.get("spec") or {}).get("drafts") or 0) for r in reqs)
            aw.drafts = drafts
            if dn:
                aw.acceptance = da / dn
            if drafts:
                aw.mean_accept_len = 1 + da / drafts
                aw.mean_draft_len = dn / drafts
            for r in reqs:
                for pos, v in ((r.get("spec") or {}).get("per_pos") or {}).items():
                    aw.per_pos[pos] = aw.per_pos.get(pos, 0.0) + float(v)
            base_reqs = [
                r for rec in base.values() for r in rec.get("requests", []) if wl == ALL or r["workload"] == wl
            ]
            if base_reqs:
                aw.speedup = speedup(_by_task(reqs, "decode_tps"), _by_task(base_reqs, "decode_tps"))
                aw.wall_speedup = speedup(_by_task(reqs, "wall_decode_tps"), _by_task(base_reqs, "wall_decode_tps"))
            if rel and drafts:
                n_dec = sum(max(0, int(r.get("n_predicted") or 0) - 1) for r in reqs)
                pred = ceil.predict(n_dec, drafts, dn, da, rel, r_cost if math.isfinite(r_cost) else 0.0)
                if pred:
                    aw.predicted = pred.predicted if math.isfinite(r_cost) else None
                    aw.ceiling = pred.ceiling
            # identity against the reference's first repetition
            if ref_reps:
                first_ref = ref_reps[min(ref_reps)]
                ref_texts = {r["task"]: r.get("text", "") for r in first_ref.get("requests", [])}
                if arm == ref_name:
                    res = identity.self_consistency(arm, _texts(reps, wl))
                else:
                    res = identity.compare(arm, ref_name, _texts(reps, wl), ref_texts)
                aw.identical, aw.compared = res.identical, res.compared
                aw.divergences = [d.to_dict() for d in res.divergences]
            out[arm][wl] = aw
    return out


def ref_deterministic(results: Mapping[str, Mapping[str, ArmWorkload]], ref: str, wl: str) -> bool | None:
    """Is a reference arm identical with itself (over reps, and for ``baseline`` with ``baseline-again``)?"""
    checks: list[ArmWorkload] = []
    own = results.get(ref, {}).get(wl)
    if own and own.compared:
        checks.append(own)
    if ref == BASELINE:
        again = results.get("baseline-again", {}).get(wl)
        if again and again.compared:
            checks.append(again)
    if not checks:
        return None
    return all(c.all_identical for c in checks)
