"""The tune's sixth step: the choice, from the measurement's paired blocks, by **the one chooser**
(:func:`specops.tune.rule.decision`, which ``specops bench`` recommends by too) among the shortlist and the
held-back candidates that were measured; what stays open; and the measurement's report rewritten to state this choice
(:func:`restate`), not a second reading of the same blocks.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specops import kinds
from specops.bench import summary
from specops.bench.arms import BASELINE
from specops.bench.identity import DEFAULT_RULE
from specops.bench.store import ResultStore, StoreError
from specops.tune import decide, evidence
from specops.tune.predict import Shortlist
from specops.tune.rule import Decision, decision, nothing_measured
from specops.tune.state import Setup


def _from_blocks(args: argparse.Namespace, results: dict[str, Any] | None, shortlisted: list[str],
                 names: list[str], planned_shares: tuple[dict[str, float] | None, str] = (None, "")
                 ) -> tuple[list[decide.Measured], decide.Choice, dict[str, str]]:
    """:func:`decision` with the tune's arguments (--rule, --margin, --mix, --tasks): the measured candidates, the
    choice, and per workload what it would prefer, in one line each."""
    d = decision(results, shortlisted, names, args.rule, args.margin, args.mix, planned_shares,
                 standard=not args.tasks)
    return d.measured, d.choice, d.prefers()


def choose(s: Setup, args: argparse.Namespace, results: dict[str, Any] | None, short: Shortlist,
           open_: Sequence[str] = ()) -> tuple[list[decide.Measured], decide.Choice, dict[str, str], list[str]]:
    """The measured candidates, the choice and what each workload would prefer, and what stays open: ``open_``
    (what the steps before said) without what the measurement settled (a held-back candidate that was measured),
    then what stays open here (shortlisted and not measured, undecided). The measurement's report is rewritten to
    state this choice (:func:`restate`)."""
    # the candidates held back that were measured (one was on course to clear the margin): in the choice, no longer
    # open
    blocks = evidence.Blocks(results["blocks"]) if results and results.get("blocks") else None
    ran = set(blocks.arms) if blocks else set()
    extra = [n for n in short.reserve if n in ran]
    said = [line for line in open_ if not any(line.startswith(f"{n}: ") for n in extra)]
    shortlisted = short.shortlisted + extra
    # the mix as prepare normalised it
    d = decision(results, shortlisted, short.measured + extra, args.rule, args.margin, s.mix,
                 (s.shares, s.shares_how), standard=not args.tasks)
    measured, choice = d.measured, d.choice
    unmeasured = [n for n in shortlisted if n not in {m.name for m in measured}]
    if results is not None and unmeasured:
        ended = (results.get("outcome") or {}).get("ended", "?")
        said.append(f"{', '.join(unmeasured)}: shortlisted, not measured (the side-by-side measurement ended: "
                    f"{ended}; a longer --budget / llama_server_tune_budget measures them)")
    if not shortlisted:
        choice = decide.Choice(kinds.PLAIN, None, "no candidate is predicted to beat plain decoding by "
                               f"{args.margin:.0%}: plain decoding, nothing measured", {})
    elif not measured:  # shortlisted, yet nothing compared with plain decoding: no answer, plain decoding meanwhile
        choice = nothing_measured(shortlisted, choice)
    elif not choice.settled:
        said.append(choice.reason)
    said.extend(choice.settle)
    pairs = types_paired(blocks, short.shortlisted, extra, s.mix or s.shares)
    choice = dataclasses.replace(choice, pairs=pairs) if pairs else choice
    for line in restate(results, Decision(measured, choice, d.workloads)):
        s.progress.note(f"tune: {line}")
    return measured, choice, d.prefers(), said


def restate(results: dict[str, Any] | None, d: Decision) -> list[str]:
    """The measurement's report (``measure.md``) and its results.json state the tune's choice, not a second answer:
    the bench's build again, given ``d`` (the bench chose by the same rule on its own inputs, but the tune's margin,
    shortlist, mix and the undecided reading of an unmeasured shortlist are the tune's). Nothing where the results
    name no work dir (a test's); a report that cannot be rebuilt is said in one line and changes no choice."""
    where = results or {}
    if not all(where.get(k) for k in ("work_dir", "report", "assets")):
        return []
    try:
        summary.build(ResultStore(Path(where["work_dir"])), Path(where["report"]), Path(where["assets"]),
                      str(where.get("rule") or DEFAULT_RULE), decided=d)
    except (OSError, ValueError, StoreError) as exc:
        return [f"{where['report']} still states the bench's own reading of the measurement, not the tune's "
                f"choice: {exc}"]
    return []


def types_paired(blocks: evidence.Blocks | None, leaders: list[str], extra: list[str],
                 weights: dict[str, float] | None) -> tuple[str, ...]:
    """Each held-back candidate that was measured against each shortlisted one, paired on the same tasks (the whole
    figure's weighting): ``exact-ngram-simple ÷ exact-ngram-mod = 1.06× [0.98, 1.15] paired on the same tasks``
    (issue 61 item 2: the record keeps the ratio between the two types)."""
    if blocks is None or not extra:
        return ()
    out = []
    for e in extra:
        for lead in leaders:
            iv = (blocks.mix_interval(e, BASELINE, weights, versus=lead) if weights
                  else blocks.interval(e, lead))
            if iv is not None:
                out.append(f"{e} ÷ {lead} = {iv.fmt()} paired on the same tasks")
    return tuple(out)


def best_measured(measured: list[decide.Measured], rule: str) -> decide.Measured | None:
    """The fastest measured candidate the rule lets win (identical output under rule identical), or None."""
    return max((m for m in measured if m.identical or rule == "fastest"), key=lambda m: m.speedup.estimate,
               default=None)
