"""From a work directory to the committed artefacts: analysis, the choice (the tune's rule), report, variables."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench import plots, report
from specops.bench.analysis import ALL, ArmWorkload, analyse, replay_design
from specops.bench.design import STOPS, Design
from specops.bench.identity import DEFAULT_RULE
from specops.bench.inventory import header_for, latest_saturation, write_vars
from specops.bench.recommend import Gate, Pick, recommend
from specops.bench.runner import IDENTITY_FILE, SPREAD_FILE
from specops.bench.store import ResultStore
from specops.kinds import PLAIN
from specops.tune.decide import Choice
from specops.tune.deploy import role_vars
from specops.tune.rule import Decision


@dataclass
class Outcome:
    report: Path
    raw_json: Path
    images: list[Path]
    picks: dict[str, Pick]
    vars_file: Path | None
    results: dict[str, dict[str, ArmWorkload]]
    raw: dict[str, Any] = field(default_factory=dict)  # what raw_json holds (results.json)


def design_of(plan: dict[str, Any]) -> Design:
    """The design a plan describes (the same one the run used), with no blocks in it yet."""
    dz = plan["design"]
    return Design(dz["arms"], dz["tasks"], reps=plan["reps"], min_tasks=dz["min_tasks"],
                  half_width=dz["half_width"], seed=plan["seed"], references=dz.get("references"),
                  fpc=dz.get("fpc", False), aa_precision=dz.get("aa_precision"),
                  identity_stop=dz.get("identity_stop", False), stop_on=dz.get("stop_on", STOPS),
                  allow_near_ties=dz.get("allow_near_ties", False),
                  shares=dz.get("shares"), whole_level=dz.get("whole_level", 0.99), reserve=dz.get("reserve", ()))


def load_results(store: ResultStore) -> tuple[dict[str, Any], Design, dict[str, dict[str, ArmWorkload]]]:
    plan = store.load_plan()
    if plan is None:
        raise FileNotFoundError(f"{store.root} has no run.json: nothing to report")
    blocks = list(store.read("blocks.jsonl"))
    outcome = store.load_json("outcome.json")
    if plan["design"]["arms"] and outcome is None and not any(b.get("type") != "fail" for b in blocks):
        raise FileNotFoundError(f"{store.root} has no finished blocks yet")
    outcome = outcome or {}
    design = replay_design(blocks, design_of(plan))
    for arm, rows in (outcome.get("status") or {}).items():
        for wl, stopped in rows.items():
            if arm in design.status and wl in design.status[arm] and stopped:
                design.status[arm][wl].stopped = stopped
    arm_defs = {a["name"]: a for a in plan["arm_defs"]}
    results = analyse(blocks, design, arm_defs, store.load_json("ceiling.json"), store.read(IDENTITY_FILE))
    return plan, design, results


def all_pruned(plan: dict[str, Any], workloads: list[str]) -> dict[str, Pick]:
    """Every speculative arm's ceiling is below 1 + margin: baseline, decided without a speed run."""
    pruned = plan.get("pruned", {})
    best = max((float(c["best"]) for c in pruned.values()), default=0.0)
    why = (f"every speculative arm's ceiling is below {1 + float(plan.get('ceiling_margin', 0.05)):.2f}× "
           f"(best {best:.2f}×): nothing can pay on this host, whatever its acceptance")
    gate = Gate(True, "not needed: the hardware ceiling alone decides")
    return {wl: Pick(wl, Choice(PLAIN, None, why, {}), gate) for wl in [*workloads, ALL]}


def reference_summary(path: Path) -> dict[str, Any]:
    """What the report needs from another run (the exhaustive reference): its picks and wall time."""
    raw = json.loads(path.read_text())
    return {
        "report": raw.get("report"),
        "what": raw.get("what"),
        "elapsed_s": raw.get("outcome", {}).get("elapsed_s", 0),
        "picks": {wl: ((p.get("arm") if p.get("valid", True) else None) or "nothing")
                  for wl, p in raw.get("recommendation", {}).items()},
    }


def _what(plan: dict[str, Any], outcome: dict[str, Any]) -> str:
    """The run in one line: exhaustive, or sequential with its budget and how it ended."""
    if plan["design"].get("exhaustive"):
        return "exhaustive: every arm, every task, {} repetitions, no stopping".format(plan.get("reps"))
    return "sequential, ceiling-pruned, budget {}, {} blocks, ended: {}".format(
        f"{plan['budget_s'] / 60:.0f} min" if plan.get("budget_s") else "none", outcome.get("blocks", "?"),
        outcome.get("ended", "?"))


def _write_vars(vars_file: Path, plan: dict[str, Any], arm_defs: dict[str, Any], deploy: Pick, rule: str,
                report_path: Path) -> Path:
    """The chosen arm's role variables (:func:`specops.tune.deploy.role_vars`) in the vars file, with the header that
    says who chose it and why."""
    d = arm_defs.get(deploy.arm, {"profile": {"spec_type": "none"}})
    derived = None
    if d.get("draft") not in (None, "draft"):
        derived = (plan.get("derived_drafts") or {}).get(d["draft"], {}).get("path")
    variables = role_vars(d, plan.get("threads"), plan.get("draft_threads"), derived)
    return write_vars(vars_file, variables, header_for(deploy.arm, deploy.reason, rule, str(report_path),
                                                       latest_saturation(report_path.parent)))


def build(
    store: ResultStore,
    report_path: Path,
    assets_dir: Path,
    rule: str = DEFAULT_RULE,
    vars_file: Path | None = None,
    reference: Path | None = None,
    decided: Decision | None = None,
) -> Outcome:
    """The analysis, the choice (the one rule's, :mod:`specops.bench.recommend`; ``decided``: the tune's own, for the
    report of its measurement), results.json, the plots, the vars file (where the A/A check lets it be applied) and
    the report."""
    plan, design, results = load_results(store)
    arm_defs = {a["name"]: a for a in plan["arm_defs"]}
    workloads = design.workloads
    ceiling = store.load_json("ceiling.json")
    outcome = store.load_json("outcome.json") or {}
    arm_ceilings = plan.get("arm_ceilings", {})
    raw = {
        "report": str(report_path), "work_dir": str(store.root), "assets": str(assets_dir),
        "what": _what(plan, outcome), "plan": plan, "ceiling": ceiling, "outcome": outcome, "rule": rule,
        "summary": {a: {wl: aw.to_dict() for wl, aw in rows.items()} for a, rows in results.items()},
        "servers": list(store.read("servers.jsonl")),
        "blocks": list(store.read("blocks.jsonl")),
        "rss": store.load_json("rss.json"),
        "spread": store.load_json(SPREAD_FILE),  # the host's batch spread, where a difference needed it (issue 78)
    }
    picks = recommend(raw, results, workloads, rule, decided) if design.arms else all_pruned(plan, workloads)
    raw["recommendation"] = {wl: p.to_dict() for wl, p in picks.items()}
    assets_dir.mkdir(parents=True, exist_ok=True)
    images = plots.plots(results, design.arms, workloads, ceiling, arm_ceilings, assets_dir)
    raw_path = assets_dir / "results.json"
    raw_path.write_text(json.dumps(raw, indent=1, ensure_ascii=False, default=str) + "\n")

    deploy = picks[ALL]
    written = (_write_vars(vars_file, plan, arm_defs, deploy, rule, report_path)
               if vars_file is not None and deploy.valid else None)
    rel = lambda p: os.path.relpath(p, report_path.parent)  # noqa: E731
    md = report.markdown(
        plan, outcome, results, arm_defs, workloads, picks, ceiling, arm_ceilings, plan.get("pruned", {}),
        [rel(i) for i in images], rule, written.read_text().split("\n", 1)[1] if written else None, rel(raw_path),
        reference_summary(reference) if reference else None, decided is not None,
    )
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(md)
    return Outcome(report_path, raw_path, images, picks, written, results, raw)
