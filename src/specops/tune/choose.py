"""The tune's sixth step: the choice, from the measurement's paired blocks (:mod:`specops.tune.evidence`): every
measured candidate against the unit's plain decoding with intervals for a new request, the fastest that is
confidently faster (and identical in output under the identity rule) chosen from the shortlist, else plain
decoding; per workload, what each would prefer."""

from __future__ import annotations

import argparse
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
    per_wl = {}
    for wl in blocks.workloads:
        c = blocks.decide(shortlisted, BASELINE, need, args.margin, identical, workload=wl)
        per_wl[wl] = c.short()
    return measured, choice, per_wl


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
    return measured, choice, per_wl


def best_measured(measured: list[decide.Measured], rule: str) -> decide.Measured | None:
    """The fastest measured candidate the rule lets win (identical output under rule identical), or None."""
    return max((m for m in measured if m.identical or rule == "fastest"), key=lambda m: m.speedup.estimate,
               default=None)
