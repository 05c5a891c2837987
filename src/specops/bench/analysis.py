"""Turn the stored blocks into per-arm, per-workload numbers (the report's tables).

Speed comes from the design (:mod:`specops.bench.design`: ratios formed inside each block); this module
adds what the requests themselves say: rates, latencies, acceptance from the counters, identity with
the reference, the speed the hardware-ceiling model predicts from the measured acceptance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specops.bench import ceiling as ceil
from specops.bench import identity, weighted
from specops.bench.arms import AA, BASELINE
from specops.bench.design import DIFFERS, Block, Design
from specops.bench.stats import Interval, mean
from specops.bench.verdict import INCONCLUSIVE, conclusion, rel_half_width

ALL = "all"


@dataclass
class ArmWorkload:
    """Numbers of one arm on one workload (or ``all``)."""

    arm: str
    workload: str
    requests: int = 0
    tasks: int = 0
    tokens: int = 0
    decode_tps: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    acceptance: float | None = None
    mean_accept_len: float | None = None
    mean_draft_len: float | None = None
    speedup: Interval | None = None
    new_task: Interval | None = None  # where one new task of the workload may land (prediction interval)
    conclusion: str = "inconclusive"
    stopped: str | None = None
    predicted: float | None = None
    ceiling: float | None = None
    identical: int = 0
    compared: int = 0
    divergences: list[dict[str, Any]] = field(default_factory=list)
    per_pos: dict[str, float] = field(default_factory=dict)
    drafts: float = 0.0

    @property
    def all_identical(self) -> bool:
        return self.compared > 0 and self.identical == self.compared

    @property
    def half_width(self) -> float | None:
        if self.speedup is None:
            return None
        hw = rel_half_width(self.speedup)
        return hw if math.isfinite(hw) else None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["speedup"] = self.speedup.to_dict() if self.speedup else None
        d["new_task"] = self.new_task.to_dict() if self.new_task else None
        d["all_identical"] = self.all_identical
        d["half_width"] = self.half_width
        return d


def _avg(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return mean(vals) if vals else None


def replay_design(blocks: list[dict[str, Any]], design: Design) -> Design:
    for rec in blocks:
        if rec.get("type") == "fail":
            design.fail(rec["arm"], rec["why"])
            continue
        b = Block(rec["index"], rec["rep"], rec["workload"], rec["task"], tuple(rec["arms"]))
        design.add(b, {a: r.get("decode_tps") for a, r in rec["results"].items()},
                   plain_s=weighted.request_seconds(rec["results"].get(BASELINE)))
    return design


def requests_of(blocks: list[dict[str, Any]], arm: str, wl: str) -> list[dict[str, Any]]:
    """The arm's answered requests on a workload (``all``: every workload), with task, workload, rep."""
    out = []
    for rec in blocks:
        if rec.get("type") == "fail" or (wl != ALL and rec["workload"] != wl):
            continue
        r = rec["results"].get(arm)
        if r is not None and "error" not in r:
            out.append({**r, "task": rec["task"], "workload": rec["workload"], "rep": rec["rep"],
                        "block": rec["index"]})
    return out


def _reference_texts(blocks: list[dict[str, Any]], ref: str) -> dict[str, str]:
    """The reference's text per task (its first answer; the A/A twin checks that it is deterministic)."""
    out: dict[str, str] = {}
    for rec in blocks:
        r = rec.get("results", {}).get(ref)
        if r is not None and "error" not in r and rec["task"] not in out:
            out[rec["task"]] = r.get("text", "")
    return out


def _texts_by_rep(reqs: list[dict[str, Any]]) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for r in reqs:
        out.setdefault(r["rep"], {})[r["task"]] = r.get("text", "")
    return out


def _extra_answers(extra: Iterable[Mapping[str, Any]], arm: str, wl: str
                   ) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """The identity top-up's answers of ``arm`` on ``wl`` (:func:`specops.bench.runner.top_up`): its texts, plain
    decoding's, and the explained differences, per task."""
    texts: dict[str, str] = {}
    plain: dict[str, str] = {}
    diffs: dict[str, Any] = {}
    for rec in extra:
        res = rec.get("results") or {}
        if rec.get("arm") != arm or (wl != ALL and rec.get("workload") != wl) or arm not in res or BASELINE not in res:
            continue
        texts[rec["task"]], plain[rec["task"]] = res[arm].get("text") or "", res[BASELINE].get("text") or ""
        if res[arm].get("difference"):
            diffs[rec["task"]] = res[arm]["difference"]
    return texts, plain, diffs


def analyse(
    blocks: list[dict[str, Any]],
    design: Design,
    arm_defs: Mapping[str, Mapping[str, Any]],
    ceiling: Mapping[str, Any] | None,
    extra: Iterable[Mapping[str, Any]] = (),
) -> dict[str, dict[str, ArmWorkload]]:
    """``{arm: {workload: ArmWorkload}}`` for every arm with data (``workload`` includes ``all``). ``extra``: the
    identity top-up's answers (identity.jsonl), counted in the identity check only."""
    extra = list(extra)
    workloads = design.workloads
    out: dict[str, dict[str, ArmWorkload]] = {}
    for arm in [BASELINE, AA, *design.arms]:
        adef = arm_defs.get(arm, {})
        ref_name = adef.get("reference", BASELINE)
        ref_texts = _reference_texts(blocks, ref_name)
        numerics = ceil.Numerics.of_profile(adef.get("profile", {}), adef.get("env", {})).name
        rel = ceil.relative_for(ceiling, numerics) if ceiling else None
        r_cost = ceil.draft_cost_ratio(ceiling, adef.get("draft"), numerics) if ceiling else float("nan")
        draft_rel = ceil.draft_relative_for(ceiling, adef.get("draft")) if ceiling else None
        rows: dict[str, ArmWorkload] = {}
        for wl in [*workloads, ALL]:
            reqs = requests_of(blocks, arm, wl)
            if not reqs:
                continue
            aw = ArmWorkload(arm, wl, requests=len(reqs), tasks=len({r["task"] for r in reqs}))
            aw.tokens = sum(int(r.get("n_predicted") or 0) for r in reqs)
            aw.decode_tps = _avg(r.get("decode_tps") for r in reqs)
            aw.ttft_s = _avg(r.get("ttft_s") for r in reqs)
            aw.e2e_s = _avg(r.get("e2e_s") for r in reqs)
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
            if arm != BASELINE:
                aw.speedup = design.interval(arm, wl) if wl != ALL else design.mix_interval(arm)
                aw.new_task = design.new_task_interval(arm, wl) if wl != ALL else None
                aw.conclusion = conclusion(aw.speedup, design.half_width)
                if arm in design.status and wl != ALL:
                    aw.stopped = design.status[arm][wl].stopped
                    if aw.stopped == DIFFERS and aw.conclusion == INCONCLUSIVE:
                        aw.conclusion = DIFFERS
            if rel and drafts:
                n_dec = sum(max(0, int(r.get("n_predicted") or 0) - 1) for r in reqs)
                pred = ceil.predict(n_dec, drafts, dn, da, rel, r_cost if math.isfinite(r_cost) else 0.0, draft_rel)
                if pred:
                    aw.predicted = pred.predicted if math.isfinite(r_cost) else None
                    aw.ceiling = pred.ceiling
            explained = {(r["task"], r["rep"]): r["difference"] for r in reqs if r.get("difference")}
            if arm == BASELINE:
                res = identity.self_consistency(arm, _texts_by_rep(reqs))
            else:
                outs, refs = _texts_by_rep(reqs), dict(ref_texts)
                if ref_name == BASELINE:
                    more, plain, diffs = _extra_answers(extra, arm, wl)
                    outs.setdefault(0, {}).update({t: x for t, x in more.items() if t not in outs.get(0, {})})
                    refs.update({t: x for t, x in plain.items() if t not in refs})
                    explained.update({(t, 0): d for t, d in diffs.items() if (t, 0) not in explained})
                res = identity.compare(arm, ref_name, outs, refs)
            aw.identical, aw.compared = res.identical, res.compared
            aw.divergences = [{**d.to_dict(), **({"explained": explained[(d.task_id, d.rep)]}
                                                  if (d.task_id, d.rep) in explained else {})}
                              for d in res.divergences]
            rows[wl] = aw
        if rows:
            out[arm] = rows
    return out


def ref_deterministic(results: Mapping[str, Mapping[str, ArmWorkload]], ref: str, wl: str) -> bool | None:
    """Is a reference arm identical with itself (over repetitions, and ``baseline`` with its A/A twin)?"""
    checks: list[ArmWorkload] = []
    own = results.get(ref, {}).get(wl)
    if own and own.compared:
        checks.append(own)
    if ref == BASELINE:
        again = results.get(AA, {}).get(wl)
        if again and again.compared:
            checks.append(again)
    if not checks:
        return None
    return all(c.all_identical for c in checks)
