"""The tune's last step: the result (``tune.json``, the host's record): every candidate's prediction and
measurement, the choice and why, the figures at N streams, what stayed open, the key that decides when a later
deploy reuses it (:mod:`specops.tune.record`), and the model the exporter prices live traffic with
(:mod:`specops.tune.live`)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops import kinds
from specops.bench import ceiling as ceil
from specops.bench.arms import BASELINE, EXACT_CACHE, PLAIN_UNIT, plain_description
from specops.bench.costmodel import Overheads, StepCosts
from specops.knobs import knob
from specops.tune import decide, live, mix, probes, record, streams, windows
from specops.tune.choose import best_measured
from specops.tune.predict import Shortlist
from specops.tune.rule import differences
from specops.tune.state import Setup


def profile_vars(name: str) -> dict[str, Any]:
    """The role variables that deploy candidate ``name`` (its speculative settings; plain: spec_type none)."""
    if name == kinds.PLAIN:
        return {"llama_server_spec_type": "none"}
    prof = {k: v for k, v in kinds.of(name).profile(name).items() if k not in EXACT_CACHE}
    if knob("draft_n_max").for_spec_type(str(prof.get("spec_type"))):
        # an n-gram type that takes the draft length: llama.cpp's own for it, not the role's draft-model default
        prof.setdefault("draft_n_max", ceil.arm_n_max(prof))
    return {f"llama_server_{k}": v for k, v in prof.items()}


def verdict(name: str, choice: decide.Choice, dropped: dict[str, str], measured: bool, shortlisted: bool) -> str:
    """What became of one candidate, for the table."""
    if name == choice.chosen:
        return "chosen"
    if name == choice.runner_up:
        return "runner-up" + (" (tie)" if name in choice.tie else "")
    if name in choice.tie:
        return "tie"
    if name in dropped and not measured:
        return dropped[name]
    if measured:
        return "measured"
    return "shortlisted, not measured" if shortlisted else "not measured"


def _rows(preds: list[decide.Prediction], short: Shortlist, measured: list[decide.Measured],
          choice: decide.Choice) -> list[dict[str, Any]]:
    """Every candidate's row: its prediction, its measurement, what became of it, its variables."""
    by_m = {m.name: m for m in measured}
    rows = []
    for p in preds:
        m = by_m.get(p.name)
        rows.append({"name": p.name, "kind": kinds.of(p.name).key, "predicted": p.predicted, "how": p.how,
                     "measured": m.speedup.fmt() if m else None,
                     "measured_interval": m.speedup.to_dict() if m else None,
                     "identical": m.identical if m else None,
                     "verdict": verdict(p.name, choice, short.dropped, m is not None, p.name in short.shortlisted),
                     "vars": profile_vars(p.name)})
    return rows


@dataclass(frozen=True)
class Found:
    """What the steps found, carried by the pipeline to the record."""

    over: Overheads | None
    preds: list[decide.Prediction]
    short: Shortlist
    measured: list[decide.Measured]
    choice: decide.Choice
    per_wl: dict[str, str]
    probes: dict[str, probes.ProbeResult]
    drift: float | None  # the plain server's last probe against its first (per-token time)
    open: list[str]  # what stays open, one line each, in the order the steps said it
    retuned: list[str]  # what moved since the --reuse result (tuned again)
    bench: Mapping[str, Any] | None = None  # the side-by-side measurement's results (its plan: where blocks went)
    live_model: dict[str, Any] | None = None  # what the exporter prices the live traffic with (:func:`live_model`)
    at_n: streams.AtN | None = None  # the figures at N streams (--parallel N > 1; None: not measured)


def result(s: Setup, args: argparse.Namespace, f: Found) -> dict[str, Any]:
    """The record: the one builder of it (at one stream; with --parallel N > 1 the figures at N,
    :func:`streams_figures`)."""
    over, preds, short, measured, choice, per_wl, found = (f.over, f.preds, f.short, f.measured, f.choice, f.per_wl,
                                                           f.probes)
    rows = _rows(preds, short, measured, choice)
    best = best_measured(measured, args.rule)
    out = {
        "chosen": choice.chosen, "runner_up": choice.runner_up, "reason": choice.reason,
        "settled": choice.settled, "tie": list(choice.tie), "paired": choice.paired, "left_out": list(choice.left_out),
        "reference": plain_description(PLAIN_UNIT),
        "mix": s.mix, "mix_how": choice.weighed or mix.describe(s.mix),
        "task_source": record.task_source(args.tasks),
        "interval": "95% confidence for the mean speedup over the traffic's requests (Student-t over the tasks: their "
                    "spread and the A/A noise count in full); one new request spreads wider",
        "best_measured": {"name": best.name, "measured": best.speedup.fmt(), "speedup": best.speedup.to_dict()}
        if best else None,
        "vars": profile_vars(choice.chosen), "per_workload": per_wl, "candidates": rows,
        "overheads": over.to_dict() if over else None, "probes": {n: r.to_dict() for n, r in found.items()},
        "open": list(f.open), "rule": args.rule, "budget_s": args.budget * 60, "phases_s": s.phases,
        "to_settle_min": choice.to_settle_min, "types_paired": list(choice.pairs),
        "to_settle_tasks": list(choice.to_settle_tasks) if choice.to_settle_tasks else None,
        "plain_drift": f.drift,
        "elapsed_s": round(time.monotonic() - s.started, 1), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build": {"commit": s.caps.commit, "prefix": str(s.prefix)},
        "models": {"target": str(args.target), "target_size": Path(args.target).stat().st_size,
                   "draft": str(args.draft) if args.draft else None,
                   "draft_size": Path(args.draft).stat().st_size if args.draft else None},
        "concurrency": "one stream: the figures are for one request at a time (one server slot); the service runs "
                       f"{args.parallel} slot(s)",
        "work_dir": str(s.work), "facts": s.facts, "key": record.key(s.facts),
        "kind": record.kind(s.facts, args),  # what another host must share to reuse this record (--shared)
        "retuned_because": list(f.retuned),
        "plan": plan_record(f.bench, s.shares), "live_model": f.live_model,
        # every measured candidate's answers against plain decoding's, each difference explained (issue 78)
        "identity": {"rule": args.rule, "spread": (f.bench or {}).get("spread"),
                     "candidates": differences(f.bench, [m.name for m in measured], args.rule)},
    }
    if args.parallel > 1:
        streams_figures(out, args, f.at_n)
    return out


def plan_record(bench: Mapping[str, Any] | None, shares: Mapping[str, float] | None) -> dict[str, Any] | None:
    """Where the measurement's blocks went and why (issue 61): per workload its share and blocks, the workloads
    with no share (never measured), how the measurement ended and each block's reason."""
    if bench is None:
        return None
    rows = [b for b in bench.get("blocks") or () if b.get("type") != "fail"]
    outcome = bench.get("outcome") or {}
    per_wl: dict[str, dict[str, Any]] = {w: {"share": round(v, 4), "blocks": 0} for w, v in (shares or {}).items()}
    for b in rows:
        per_wl.setdefault(str(b.get("workload")), {"share": None, "blocks": 0})["blocks"] += 1
    return {
        "workloads": per_wl, "not_measured": list(outcome.get("unshared") or []),
        "ended": outcome.get("ended"), "allocation": outcome.get("allocation"),
        "measured_beside": dict(outcome.get("activated") or {}),  # held back, then measured: why
        "why": [f"block {int(b.get('index', 0)) + 1}: {b['plan']}" for b in rows if b.get("plan")],
    }


def live_model(s: Setup, costs: StepCosts, over: Overheads | None, chosen: str, measured: list[decide.Measured],
               blocks: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """What the exporter needs to price the chosen profile on the live traffic (:mod:`specops.tune.live`): the step
    costs (the draft model's only where the profile drafts with it), the overheads, and its measured and modelled
    figures on the same requests (``blocks``: the measurement's), and the live check's prediction band for a window of
    n requests (:func:`live_band`); None for plain decoding or where the model cannot speak for it; with it what
    stays open (why not, or why no band)."""
    if chosen == kinds.PLAIN or chosen not in {m.name for m in measured} or over is None:
        return None, []
    if kinds.of(chosen).priced != kinds.TARGET_DRAFT:  # its kind is priced without the draft model's step
        costs = StepCosts(costs.target_step_s, costs.target_rel)
    blocks = list(blocks)
    model, why = live.build(costs, over, blocks, chosen, BASELINE)
    if model is None:
        return None, [f"{chosen}: {why}"]
    out = model.to_dict()
    band, why = live_band(model, blocks, chosen, s.shares)
    out["band"] = band
    return out, [] if band is not None else [f"{chosen}: {why}"]


def live_band(model: live.LiveModel, blocks: list[Mapping[str, Any]], chosen: str,
              shares: Mapping[str, float] | None) -> tuple[dict[str, Any] | None, str]:
    """The live figure's prediction band for a window of n requests (:mod:`specops.tune.band`): the model on windows
    of the measurement's requests of ``chosen``, drawn at ``shares`` (None: each task alike); None and why where there
    is none (the exporter then exports no band, and the alerts that need one stay quiet)."""
    try:
        return windows.band(windows.from_blocks(blocks, chosen, BASELINE), shares, model.predict_sums).to_dict(), ""
    except ImportError as exc:
        return None, f"no prediction band for the live check (numpy: {exc})"
    except ValueError as exc:
        return None, f"no prediction band for the live check ({exc})"


def streams_figures(out: dict[str, Any], args: argparse.Namespace, at_n: streams.AtN | None) -> None:
    """--parallel N > 1: the figures at N streams (None: not measured) and what the record's figures are for."""
    out["streams"] = at_n.to_dict() if at_n else None
    if at_n:
        out["concurrency"] = (f"{args.parallel} streams: the table's figures are for one request at a time; the "
                              f"choice was measured again with {at_n.n} streams in flight (streams)"
                              + ("" if at_n.n == args.parallel else ", the largest N whose servers fit in memory"))
