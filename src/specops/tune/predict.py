"""The tune's fourth step: every candidate predicted from the step costs and the probes
(:mod:`specops.bench.costmodel`, :func:`specops.tune.decide.predict`), and the shortlist measured side by side:
what cannot clear plain decoding by the margin is dropped."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from specops import kinds
from specops.bench.costmodel import Overheads, StepCosts, fit_overheads, predicted_run_speedup
from specops.tune import decide, probes
from specops.tune.state import Setup

STEP_SLACK = 1.1  # llama-bench's step may exceed the plain server's per-token time by this much (noise)


def predict(s: Setup, costs: StepCosts, found: dict[str, probes.ProbeResult],
            pruned: dict[str, float] | None = None) -> tuple[Overheads, list[decide.Prediction], list[str]]:
    """The server's fitted overheads and every candidate's prediction, kind by kind as the table says
    (:mod:`specops.kinds`: its cost inputs, its probe); those the ceiling ruled out, and those not probed, with why;
    and what makes the predictions doubtful (what stays open)."""
    said: list[str] = []
    plain = found[probes.PLAIN_ARM].run
    ceiling_slower = costs.target_step_s > STEP_SLACK * plain.seconds_per_token
    if ceiling_slower:
        said.append(f"llama-bench's single-token step ({costs.target_step_s * 1e3:.1f} ms) is slower than the plain "
                      f"server's whole time per token ({plain.seconds_per_token * 1e3:.1f} ms): the ceiling does not "
                      "price this server (too few repetitions, other load?), so the server-overhead terms are 0 and "
                      "the predictions rest on llama-bench's relative costs alone; only the side-by-side measurement "
                      "decides")
    # the round terms are fitted on the probes of a kind whose every step llama-bench priced (the draft model's)
    fitted = [found[n].run for n in kinds.probe_names(s.names) if kinds.of(n).priced == kinds.TARGET_DRAFT
              and n in found and not found[n].error]
    over = fit_overheads(costs, plain, fitted)
    missing = (["per token"] if over.per_token <= 0 else []) + (["per round", "per drafted token"]
                                                                if not over.runs else [])
    if missing and not ceiling_slower:
        why = ("no draft-model probe ran to fit the round terms on (the ceiling ruled the draft model out, or there "
               "is none)" if not over.runs else "llama-bench's step is no faster than the plain server's per token")
        said.append(f"server-overhead terms missing from the predictions: {', '.join(missing)} ({why}); an n-gram "
                      "candidate's prediction then carries none of the server's own cost of a round, so it reads "
                      "high (14–21% on the 2-core CPU, 2026-11-27): only the side-by-side measurement decides")
    free = StepCosts(costs.target_step_s, costs.target_rel)  # no draft model priced: the target's costs alone
    preds: list[decide.Prediction] = []
    for k in kinds.KINDS:
        mine = [n for n in s.names if k.matches(n) and n not in (pruned or {})]
        if not mine:
            continue
        kc = costs if k.priced == kinds.TARGET_DRAFT else free
        if k.probe == kinds.LENGTHS:
            preds += _by_lengths(k, mine, kc, over, found)
        elif k.probe == kinds.OWN:
            preds += decide.predict(kc, over, None, [], [decide.Probe(n, found[n].run, found[n].per_pos)
                                                         for n in mine if n in found and not found[n].error])
    preds += [decide.Prediction(n, b, f"the ceiling: at most {b:.2f}× even with every drafted token accepted "
                                "(not probed)") for n, b in (pruned or {}).items()]
    known = {p.name for p in preds}
    for n in s.names:
        if n not in known:
            why = found[n].error if n in found and found[n].error else (
                "not probed" if s.ngram_probes or kinds.of(n).probe != kinds.OWN else
                "not probed on a CPU build (--ngram-probes auto): measured side by side instead")
            preds.append(decide.Prediction(n, None, why))
    return over, preds, said


def _by_lengths(k: kinds.Kind, names: list[str], costs: StepCosts, over: Overheads,
                found: dict[str, probes.ProbeResult]) -> list[decide.Prediction]:
    """A kind with lengths: every length from its longest probe's per-position acceptance (a shorter greedy draft is
    a prefix of the longer one); where the server kept no per-position counters, the probed length from its own
    run. A kind whose own step llama-bench cannot price (priced on the target alone) reads high, and says so."""
    longest = kinds.longest(k, names)
    probe = found.get(longest or "")
    if probe is None or probe.error or probe.run.drafts <= 0:
        return []
    n_max = k.length(probe.arm)
    out = decide.predict(costs, over, decide.Probe(probe.arm, probe.run, probe.per_pos, n_max),
                         kinds.lengths_of(k, names), name_of=k.name)
    if not probe.per_pos:
        out = [p if p.name != probe.arm else decide.Prediction(
            p.name, predicted_run_speedup(costs, over, probe.run),
            "its own probe's counters (the server kept none per position)") for p in out]
    if k.priced == kinds.TARGET:
        out = [decide.Prediction(p.name, p.predicted, p.how + "; its own draft step is not priced (llama-bench "
                                 "cannot run it alone): reads high, the measurement decides") for p in out]
    return out


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
    open: tuple[str, ...] = ()  # what the shortlist leaves open, one line each

    @property
    def measured(self) -> list[str]:
        return self.shortlisted + self.compared


def shortlist(s: Setup, args: argparse.Namespace, preds: list[decide.Prediction]) -> Shortlist:
    """The best few predictions (--top, --margin), llama.cpp's own default type always among them."""
    shortlisted, dropped = decide.shortlist(preds, s.top, args.margin, always=(
        kinds.default_candidate(s.caps.commit),))
    compared = [p.name for p in preds if args.measure_all and p.predicted is not None and p.name not in shortlisted]
    s.meter.update("predictions", f"{len(preds)} candidates predicted, shortlisted: {', '.join(shortlisted) or 'none'}",
                   s.left())
    return Shortlist(shortlisted, dropped, compared, reserve(preds, dropped, compared, args.reserve),
                     tuple(f"{n}: {why}" for n, why in dropped.items() if why.endswith("stays open")))


def reserve(preds: list[decide.Prediction], dropped: dict[str, str], compared: list[str], most: int) -> list[str]:
    """The candidates that stay open, at most ``most`` (--reserve): the n-gram types in llama.cpp's order (ngram-simple,
    then map-k), then the others by prediction, best first."""
    open_ = [p for p in preds if p.name in dropped and dropped[p.name].endswith("stays open")
             and p.name not in compared]

    def rank(p: decide.Prediction) -> tuple[int, float]:
        kind = str(kinds.of(p.name).profile(p.name).get("spec_type"))
        order = kinds.RESERVE_ORDER.index(kind) if kind in kinds.RESERVE_ORDER else len(kinds.RESERVE_ORDER)
        return order, -(p.predicted or 0.0)

    return [p.name for p in sorted(open_, key=rank)][:max(0, most)]
