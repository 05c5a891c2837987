"""The tune's fourth step: every candidate predicted from the step costs and the probes
(:mod:`specops.bench.costmodel`, :func:`specops.tune.decide.predict`), and the shortlist measured side by side:
what cannot clear plain decoding by the margin is dropped."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from specops.bench.arms import parse_arm
from specops.bench.costmodel import Overheads, StepCosts, fit_overheads
from specops.tune import decide, probes
from specops.tune.state import Setup

STEP_SLACK = 1.1  # llama-bench's step may exceed the plain server's per-token time by this much (noise)


def predict(s: Setup, costs: StepCosts, found: dict[str, probes.ProbeResult],
             has_draft: bool, pruned: dict[str, float] | None = None) -> tuple[Overheads, list[decide.Prediction]]:
    """The server's fitted overheads and every candidate's prediction (those the ceiling ruled out, and those not
    probed, with why); what makes the predictions doubtful is said in ``s.open``."""
    draft_runs = [found[n].run for n in (probes.draft_candidate(max(s.lengths)), probes.draft_candidate(
        min(s.lengths))) if n in found and not found[n].error]
    plain = found[probes.PLAIN_ARM].run
    ceiling_slower = costs.target_step_s > STEP_SLACK * plain.seconds_per_token
    if ceiling_slower:
        s.open.append(f"llama-bench's single-token step ({costs.target_step_s * 1e3:.1f} ms) is slower than the plain "
                      f"server's whole time per token ({plain.seconds_per_token * 1e3:.1f} ms): the ceiling does not "
                      "price this server (too few repetitions, other load?), so the server-overhead terms are 0 and "
                      "the predictions rest on llama-bench's relative costs alone; only the side-by-side measurement "
                      "decides")
    over = fit_overheads(costs, plain, draft_runs)
    missing = (["per token"] if over.per_token <= 0 else []) + (["per round", "per drafted token"]
                                                                if not over.runs else [])
    if missing and not ceiling_slower:
        why = ("no draft-model probe ran to fit the round terms on (the ceiling ruled the draft model out, or there "
               "is none)" if not over.runs else "llama-bench's step is no faster than the plain server's per token")
        s.open.append(f"server-overhead terms missing from the predictions: {', '.join(missing)} ({why}); an n-gram "
                      "candidate's prediction then carries none of the server's own cost of a round, so it reads "
                      "high (14–21% on the 2-core CPU, 2026-11-27): only the side-by-side measurement decides")
    longest = found.get(probes.draft_candidate(max(s.lengths))) if has_draft else None
    draft_probe = (decide.Probe(longest.arm, longest.run, longest.per_pos, max(s.lengths))
                   if longest and not longest.error and longest.run.drafts > 0 else None)
    others = [decide.Probe(n, found[n].run, found[n].per_pos) for n in s.names
              if parse_arm(n).draft is None and n in found and not found[n].error]
    preds = decide.predict(costs, over, draft_probe, s.lengths if has_draft else [], others,
                           name_of=probes.draft_candidate)
    preds += [decide.Prediction(n, b, f"the ceiling: at most {b:.2f}× even with every drafted token accepted "
                                "(not probed)") for n, b in (pruned or {}).items()]
    known = {p.name for p in preds}
    for n in s.names:
        if n not in known:
            why = found[n].error if n in found and found[n].error else (
                "not probed" if s.ngram_probes or parse_arm(n).draft is not None else
                "not probed on a CPU build (--ngram-probes auto): measured side by side instead")
            preds.append(decide.Prediction(n, None, why))
    return over, preds



@dataclass(frozen=True)
class Shortlist:
    """What is measured against plain decoding: the shortlist (the choice is made from it) and, with
    --measure-all, every other predicted candidate (for comparison); ``dropped``: why each other one is not."""

    shortlisted: list[str]
    dropped: dict[str, str]
    compared: list[str]
    # what stays open (within the predictions' error, or unpredicted), held back and measured beside a candidate
    # once one is on course to clear the margin (issue 61 item 2), in llama.cpp's per-type order, then predicted
    reserve: list[str] = field(default_factory=list)

    @property
    def measured(self) -> list[str]:
        return self.shortlisted + self.compared


def shortlist(s: Setup, args: argparse.Namespace, preds: list[decide.Prediction]) -> Shortlist:
    """The best few predictions (--top, --margin), llama.cpp's own default type always among them."""
    shortlisted, dropped = decide.shortlist(preds, s.top, args.margin, always=(
        probes.engine_default(s.caps.commit) or probes.DEFAULT_ARM,))
    s.open += [f"{n}: {why}" for n, why in dropped.items() if why.endswith("stays open")]
    compared = [p.name for p in preds if args.measure_all and p.predicted is not None and p.name not in shortlisted]
    s.meter.update("predictions", f"{len(preds)} candidates predicted, shortlisted: {', '.join(shortlisted) or 'none'}",
                   s.left())
    return Shortlist(shortlisted, dropped, compared, reserve(preds, dropped, compared, args.reserve))


RESERVE_ORDER = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache")  # llama.cpp's per-type defaults


def reserve(preds: list[decide.Prediction], dropped: dict[str, str], compared: list[str], most: int) -> list[str]:
    """The candidates that stay open, at most ``most`` (--reserve): the n-gram types in llama.cpp's order (ngram-simple,
    then map-k), then the others by prediction, best first."""
    open_ = [p for p in preds if p.name in dropped and dropped[p.name].endswith("stays open")
             and p.name not in compared]

    def rank(p: decide.Prediction) -> tuple[int, float]:
        kind = str(parse_arm(p.name).profile.get("spec_type"))
        order = RESERVE_ORDER.index(kind) if kind in RESERVE_ORDER else len(RESERVE_ORDER)
        return order, -(p.predicted or 0.0)

    return [p.name for p in sorted(open_, key=rank)][:max(0, most)]
