"""From a work directory to the committed artefacts: analysis, recommendation, goals, report, vars."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.bench import report
from specops.bench.analysis import ALL, ArmWorkload, analyse
from specops.bench.arms import BASELINE
from specops.bench.inventory import header_for, inventory_vars, write_vars
from specops.bench.recommend import Pick, recommend
from specops.bench.store import ResultStore

DEFAULT_ARMS = ("spec-default", "draft-plain")


@dataclass
class Outcome:
    report: Path
    raw_json: Path
    images: list[Path]
    picks: dict[str, Pick]
    vars_file: Path | None
    goals: list[tuple[str, str]]


def goals(
    results: Mapping[str, Mapping[str, ArmWorkload]], picks: Mapping[str, Pick], workloads: list[str]
) -> list[tuple[str, str]]:
    """The ticket's speed goals, each with a plain verdict (met / not met / not measured)."""
    out: list[tuple[str, str]] = []
    deploy = picks.get(ALL)
    if deploy is None:
        return out
    arm_rows = results.get(deploy.arm, {})
    bad = [wl for wl in workloads if (aw := arm_rows.get(wl)) and aw.speedup and aw.speedup.significantly_below(1.0)]
    out.append(
        (
            "deployed setting ≥ 1.0× baseline on every workload (within CI)",
            "met" if not bad else f"NOT met on {', '.join(bad)}",
        )
    )
    for wl in workloads:
        winners = [
            a
            for a, rows in results.items()
            if (aw := rows.get(wl)) and aw.speedup and aw.speedup.significantly_above(1.0) and a != BASELINE
        ]
        pk = picks.get(wl)
        if winners:
            ok = pk is not None and pk.arm != BASELINE
            out.append(
                (
                    f"{wl}: > 1.0× where some arm beats baseline ({', '.join(winners[:4])})",
                    f"met ({pk.arm})"
                    if ok and pk
                    else "not met under the identity rule: the winners change the output",
                )
            )
        else:
            out.append((f"{wl}: any arm above baseline?", "no arm beats baseline here → baseline"))
    d_all = arm_rows.get(ALL)
    for ref in DEFAULT_ARMS:
        r = results.get(ref, {}).get(ALL)
        if d_all and d_all.speedup and r and r.speedup:
            ratio = d_all.speedup.estimate / r.speedup.estimate
            out.append(
                (
                    f"≥ 1.3× llama.cpp default `{ref}` on the whole task set",
                    f"{ratio:.2f}× → {'met' if ratio >= 1.3 else 'NOT met'}",
                )
            )
    if d_all and d_all.speedup and d_all.predicted:
        ratio = d_all.speedup.estimate / d_all.predicted
        out.append(
            (
                "≥ 0.9× the speedup predicted from its own acceptance and draft cost",
                f"{ratio:.2f}× → {'met' if ratio >= 0.9 else 'NOT met'}",
            )
        )
    elif deploy.arm == BASELINE:
        out.append(("≥ 0.9× own ceiling", "baseline is its own ceiling (1.0×)"))
    return out


def build(
    store: ResultStore,
    report_path: Path,
    assets_dir: Path,
    rule: str = "identical",
    vars_file: Path | None = None,
    include_partial: bool = False,
) -> Outcome:
    plan = store.load_plan()
    if plan is None:
        raise FileNotFoundError(f"{store.root} has no run.json: nothing to report")
    data = store.load_all(include_partial=include_partial)
    if not data:
        raise FileNotFoundError(f"{store.root} has no finished arm-repetitions yet")
    arm_defs: dict[str, dict[str, Any]] = {a["name"]: a for a in plan["arm_defs"] if a["name"] in data}
    workloads: list[str] = list(plan.get("workload_counts", {}))
    ceiling = store.load_json("ceiling.json")
    results = analyse(data, arm_defs, workloads, ceiling)
    picks = recommend(results, arm_defs, workloads, rule)
    g = goals(results, picks, workloads)

    assets_dir.mkdir(parents=True, exist_ok=True)
    images = report.plots(results, arm_defs, workloads, ceiling, assets_dir)
    raw = {
        "plan": plan,
        "ceiling": ceiling,
        "rule": rule,
        "summary": {a: {wl: aw.to_dict() for wl, aw in rows.items()} for a, rows in results.items()},
        "recommendation": {wl: p.to_dict() for wl, p in picks.items()},
        "goals": g,
        "runs": {a: {str(r): rec for r, rec in reps.items()} for a, reps in data.items()},
    }
    raw_path = assets_dir / "results.json"
    raw_path.write_text(json.dumps(raw, indent=1, ensure_ascii=False, default=str) + "\n")

    vars_text = None
    written: Path | None = None
    deploy = picks[ALL]
    if vars_file is not None:
        d = arm_defs.get(deploy.arm, {"profile": {"spec_type": "none"}})
        derived = None
        if d.get("draft") not in (None, "draft"):
            derived = (plan.get("derived_drafts") or {}).get(d["draft"], {}).get("path")
        variables = inventory_vars(d, plan.get("threads"), plan.get("draft_threads"), derived)
        written = write_vars(vars_file, variables, header_for(deploy.arm, deploy.reason, rule, str(report_path)))
        vars_text = written.read_text().split("\n", 1)[1]
    loads = [rec.get("machine", {}).get("loadavg_before", [None])[0] for reps in data.values() for rec in reps.values()]
    loads = sorted(x for x in loads if x is not None)
    if loads:
        plan = {
            **plan,
            "load_summary": {"min": loads[0], "median": loads[len(loads) // 2], "max": loads[-1], "n": len(loads)},
        }
    rel = lambda p: os.path.relpath(p, report_path.parent)  # noqa: E731
    md = report.markdown(
        plan,
        results,
        arm_defs,
        workloads,
        picks,
        ceiling,
        g,
        [rel(i) for i in images],
        rule,
        vars_text,
        rel(raw_path),
    )
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(md)
    return Outcome(report_path, raw_path, images, picks, written, g)
