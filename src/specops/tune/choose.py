"""The tune's sixth step: the choice, from the measurement's paired blocks (:mod:`specops.tune.evidence`): every
measured candidate against the unit's plain decoding with intervals for a new request, the fastest that is
confidently faster (and identical in output under the identity rule) chosen from the shortlist, else plain
decoding; per workload, what each would prefer."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from specops.bench.arms import BASELINE
from specops.tune import decide, evidence, mix
from specops.tune.predict import Shortlist
from specops.tune.state import Setup, TuneError


def identity(results: dict[str, Any], names: list[str]) -> dict[str, bool | None]:
    """Per candidate: its output identical to plain decoding's on every compared request (None: not judged)."""
    out: dict[str, bool | None] = {}
    for n in names:
        aw = (results.get("summary", {}).get(n) or {}).get("all") or {}
        out[n] = (aw.get("identical") == aw.get("compared")) if aw.get("compared") else None
    return out


def _from_blocks(args: argparse.Namespace, results: dict[str, Any] | None, shortlisted: list[str],
                 names: list[str]) -> tuple[list[decide.Measured], decide.Choice, dict[str, str]]:
    """Every measured candidate against the unit's plain decoding (the bench's baseline under --plain unit), paired
    in the same blocks, with intervals for a new request; the choice from the shortlist, and per workload what it
    would prefer."""
    need = args.rule == "identical"
    if results is None or not results.get("blocks"):
        return [], decide.choose([], need), {}
    blocks = evidence.Blocks(results["blocks"])
    identical = identity(results, names)
    try:  # over the mix, weighted by time, when --mix was given
        measured, _ = blocks.measured(names, BASELINE, identical, mix=args.mix)
        choice = blocks.decide(shortlisted, BASELINE, need, args.margin, identical, mix=args.mix)
    except mix.MixError as exc:
        raise TuneError(f"{exc}; nothing was chosen") from None
    # a mix's interval is the delta method's: no spread per task to project for the whole figure
    open_lines = [] if args.mix else settle_note(blocks, results, choice, args.margin, None)
    per_wl: dict[str, str] = {}
    for wl in blocks.workloads:
        c = blocks.decide(shortlisted, BASELINE, need, args.margin, identical, workload=wl)
        per_wl[wl] = c.short()
        open_lines += settle_note(blocks, results, c, args.margin, wl)
    return measured, dataclasses.replace(choice, settle=tuple(open_lines)), per_wl


def settle_note(blocks: evidence.Blocks, results: dict[str, Any], c: decide.Choice, margin: float,
                workload: str | None) -> list[str]:
    """For an undecided figure (overall, or one workload's): how many tasks would settle it if its estimate and the
    tasks' spread held (:func:`specops.tune.decide.tasks_to_settle`), the minutes at this host's time a block, and
    what to set where the task set holds fewer."""
    if c.settled or c.chosen != decide.PLAIN or not c.runner_up:
        return []
    fig = blocks.interval(c.runner_up, BASELINE, workload)
    if fig is None or not fig.has_ci:
        return []
    counts = (results.get("plan") or {}).get("workload_counts") or {}
    have = int(sum(counts.values()) if workload is None else counts.get(workload, 0))
    outcome = results.get("outcome") or {}
    per_block = float(outcome.get("elapsed_s") or 0) / max(1, int(outcome.get("blocks") or 0))
    head = (f"{workload or 'overall'}: {c.runner_up} {fig.fmt()} against the unit's plain decoding on {fig.n} tasks "
            "is undecided")
    k = decide.tasks_to_settle(fig, margin)
    if k is None:
        return [f"{head}; at its spread, not even 500 tasks would settle it"]
    line = f"{head}; about {k} tasks would settle it if its estimate and spread hold"
    if per_block > 0:
        more = max(0, k - fig.n) * per_block / 60
        line += f" (~{more:.0f} min more of measuring at {per_block:.0f} s a block here)"
    if have and k > have:
        line += (f"; the task set holds {have}: more with --limit-per-workload / llama_server_tune_limit_per_workload, "
                 "or the traffic's own tasks (--tasks / llama_server_tune_tasks)")
    return [line]


def choose(s: Setup, args: argparse.Namespace, results: dict[str, Any] | None,
           short: Shortlist) -> tuple[list[decide.Measured], decide.Choice, dict[str, str]]:
    """The measured candidates, the choice and what each workload would prefer; what stays open (shortlisted and
    not measured, undecided) is said in ``s.open``."""
    shortlisted = short.shortlisted
    measured, choice, per_wl = _from_blocks(args, results, shortlisted, short.measured)
    unmeasured = [n for n in shortlisted if n not in {m.name for m in measured}]
    if results is not None and unmeasured:
        ended = (results.get("outcome") or {}).get("ended", "?")
        s.open.append(f"{', '.join(unmeasured)}: shortlisted, not measured (the side-by-side measurement ended: "
                      f"{ended}; a longer --budget / llama_server_tune_budget measures them)")
    if not shortlisted:
        choice = decide.Choice(decide.PLAIN, None, "no candidate is predicted to beat plain decoding by "
                               f"{args.margin:.0%}: plain decoding, nothing measured", {})
    elif not measured:  # shortlisted, yet nothing compared with plain decoding: no answer, plain decoding meanwhile
        choice = decide.Choice(decide.PLAIN, None, f"undecided: {', '.join(shortlisted)} shortlisted, none measured "
                               "against plain decoding within the budget; plain decoding is served until a tune "
                               "with more time settles it", {}, settled=False, left_out=choice.left_out)
    elif not choice.settled:
        s.open.append(choice.reason)
    s.open.extend(choice.settle)
    return measured, choice, per_wl


def best_measured(measured: list[decide.Measured], rule: str) -> decide.Measured | None:
    """The fastest measured candidate the rule lets win (identical output under rule identical), or None."""
    return max((m for m in measured if m.identical or rule == "fastest"), key=lambda m: m.speedup.estimate,
               default=None)
