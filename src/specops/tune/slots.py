"""The tune's seventh step, for a service of N slots (``--parallel`` N > 1): the one-stream choice (or the best
measured) against plain decoding, both with N streams in flight (:mod:`specops.tune.streams`), at the largest N
whose two servers fit the build's memory, and the choice made again for N."""

from __future__ import annotations

import argparse
import dataclasses

from specops import kinds
from specops.bench import ceiling as ceil
from specops.bench.arms import BASELINE, on_unit, parse_arm
from specops.fit import MIB, FitError, FitParams, Memory, estimate, measure_memory
from specops.ggufmeta import GGUFError
from specops.tune import decide, streams
from specops.tune.choose import best_measured
from specops.tune.state import REPORT_RESERVE_S, Setup


def streams_fit(s: Setup, args: argparse.Namespace, name: str, n: int,
                 memory: Memory | None = None) -> tuple[int, str]:
    """The largest N <= n at which ``name``'s server and plain decoding's, both at ``--parallel N`` side by side (as the
    measurement at N runs them), fit the build's memory (host RAM, or the GPU's), and the line that says so when it
    is below n (the fit cannot be read: n, and the line says that)."""
    arms = [on_unit(parse_arm(name)), on_unit(parse_arm(BASELINE))]
    margin = 0

    def need(m: int) -> int:
        nonlocal margin
        total = 0
        for arm in arms:
            prof = s.cfg.profile_for(arm)
            params = FitParams(ctx_size=args.ctx_size, parallel=m, cache_type_k=prof.cache_type_k or "f16",
                               cache_type_v=prof.cache_type_v or "f16", flash_attn=prof.flash_attn != "off",
                               draft_n_max=ceil.arm_n_max(arm.profile),
                               spec_type=str(arm.profile.get("spec_type") or "none"))
            rep = estimate(args.target, s.cfg.draft_for(arm), params, memory)
            total, margin = total + rep.needed, max(margin, rep.margin)
        return total

    try:
        memory = memory or measure_memory(s.cfg.backend)
        need(1)  # the margin, and any error, before the search
        fit = streams.fitting_n(n, need, memory.available - margin)
    except (FitError, GGUFError) as exc:
        return n, f"memory fit at {n} streams not checked ({str(exc).splitlines()[0]}): measured at {n}"
    if fit >= n:
        return n, ""
    short = (f"{name} and plain decoding, side by side at --parallel {n}, do not fit in {memory.kind} here "
             f"({memory.available / MIB:,.0f} MiB available, {need(n) / MIB:,.0f} MiB + {margin / MIB:,.0f} MiB "
             "margin needed)")
    if fit < 2:
        return fit, f"nothing measured at {n} streams: {short}: the choice is for one stream"
    return fit, f"{short}: measured at {fit} streams, the largest N that fits"


def at_n(s: Setup, args: argparse.Namespace, choice: decide.Choice, measured: list[decide.Measured],
         plain_s_per_token: float = 0.0) -> tuple[streams.AtN | None, decide.Choice, list[str]]:
    """The service runs N slots: the one-stream choice (or, plain decoding chosen, the best measured that may win)
    against plain decoding, both with N streams in flight, and the choice for N (:mod:`specops.tune.streams`).
    ``plain_s_per_token`` (the plain probe's, one stream) gives each phase's tail (:func:`streams.request_s`), as it
    gave the reserve the one-stream measurement left for this. With them, what stays open (one line, or none)."""
    n = args.parallel
    best = best_measured(measured, args.rule)
    name = choice.chosen if choice.chosen != kinds.PLAIN else (best.name if best else None)
    if name is None:
        return None, choice, [f"nothing measured at {n} streams: no candidate measured at one stream may be chosen"]
    fit_n, why = streams_fit(s, args, name, n)
    said = [why] if fit_n < n else []
    if fit_n < 2:
        return None, choice, said
    n = fit_n
    workloads = tuple(w for w in args.workloads.split(",") if w.strip())
    plan = streams.plan_for(n, s.left() - REPORT_RESERVE_S - streams.START_S, args.max_tokens,
                            tuple(str(p) for p in args.tasks or ()), workloads,
                            tail_s=streams.request_s(n, args.max_tokens, plain_s_per_token))
    if plan is None:
        return None, choice, [*said, f"{name}: not measured at {n} streams (the budget was spent): the choice is for "
                              "one stream"]
    s.meter.update("streams", f"{name} and plain decoding, {n} streams each, {plan.blocks} blocks", s.left())
    at = streams.measure(s.cfg, name, n, plan, s.work / f"streams-n{n}")
    stands, settled, why = streams.verdict(at, args.margin, args.rule != "fastest")
    if stands == (choice.chosen == name):  # the one-stream choice holds at N
        return at, dataclasses.replace(choice, reason=f"{choice.reason}; at {n} streams: {why}"), said
    if stands:
        return at, decide.Choice(name, None, f"chosen for {n} streams: {why} (at one stream: {choice.reason})",
                                 choice.figures, left_out=choice.left_out, weighed=choice.weighed), said
    return at, decide.Choice(kinds.PLAIN, name, f"plain decoding for {n} streams: {why} (at one stream: "
                             f"{choice.reason})", choice.figures, settled=settled, left_out=choice.left_out,
                             weighed=choice.weighed), said
