"""The tune's fifth step: the shortlist side by side with the unit's plain decoding, by the bench's library
(:func:`specops.bench.session.measure`: its paired design, A/A check and identity rule) within what is left of the
budget; the bench's results come back as a value (its report and results.json are still written to the work dir,
for whoever reads them).

The design's ``stop_on`` names the futility stops only (:data:`specops.bench.design.FUTILITY`). With shares (every
tune: the mix, or the task set's own) the stops look at the whole figure: a candidate that cannot pay stops
everywhere, and one whose figure is confidently faster stops too, at the run's error budget (issue 79: one-sided 2.5%
over every look and every candidate measured, the level the final choice reads as well, so a gain that first looks
confident is held to what the choice would serve). Workloads end with unequal task counts; the choice weighs them by
the task set's shares (:mod:`specops.tune.choose`), not by how many of their tasks ran."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specops.bench import session
from specops.bench.arms import PLAIN_UNIT
from specops.bench.design import FUTILITY, STOPS
from specops.bench.settings import DEFAULT_DRAFT, BenchSettings, default_model
from specops.tune import progress, streams
from specops.tune.state import REPORT_RESERVE_S, Setup

REQUEST_SLACK = 1.5  # a measured request against the plain probe's time per token (slower arms, prompt, slicing)


def settings(s: Setup, args: argparse.Namespace, names: list[str], minutes: float,
             plain_s_per_token: float = 0.0, reserve: list[str] | None = None) -> BenchSettings:
    """The bench run that measures ``names`` within ``minutes``: the unit's plain decoding as the reference, no
    ceiling (the tune priced it already), a fresh work dir, no inventory variables."""
    guess = REQUEST_SLACK * args.max_tokens * plain_s_per_token
    return BenchSettings(
        target=Path(args.target), llama_prefix=s.prefix, arms=",".join([*names, *(reserve or [])]), no_ceiling=True,
        budget=float(f"{minutes:.2f}"), limit_per_workload=args.limit_per_workload,
        # futility only among the per-workload stops: after 3 tasks of every workload a candidate stops when its
        # whole figure is slower or cannot gain the bench's half-width (safe: such a stop can only leave plain
        # decoding served). The whole figure's faster stop is not a stop_on: it reads the run's error budget, the
        # level the final choice reads (a sample that stops when it first looks confidently faster at 95% overstates
        # the confidence: the bench's default, 4 tasks and every stop, let a team's 12 edits decide on 4). Output
        # that differs still stops it at once.
        min_tasks=3, stop_on=tuple(s for s in STOPS if s in FUTILITY),  # in the bench's order: the plan records it
        max_tokens=args.max_tokens, ctx_size=args.ctx_size, work_dir=s.work / "measure", fresh=True,
        report=s.work / "measure.md", assets=s.work / "measure-assets", no_vars=True, rule=args.rule,
        interleave="slices", plain=PLAIN_UNIT,
        # the first block is checked against the budget too (a 2-core CPU's took 128 s)
        request_guess=float(f"{guess:.2f}") if plain_s_per_token > 0 else None,
        # without --draft the bench keeps its own default draft model in its plan (no candidate drafts with it)
        draft=Path(args.draft) if args.draft else default_model(DEFAULT_DRAFT),
        # with shares (the mix, or the task set's own) a workload without one is never measured ("code share 0" in
        # the progress line), the blocks follow share × spread and the stops the whole figure (specops.bench.design)
        workloads=tuple(w.strip() for w in (args.workloads or "").split(",") if w.strip()),
        shares=tuple(s.shares.items()) if s.shares else (),
        reserve=tuple(reserve or ()) if s.shares else (),
        tasks=tuple(Path(p) for p in args.tasks or ()), threads=args.threads or None,
        synth_rates=tuple(args.synth_rates), quiet=bool(args.quiet),
    )


def measure(s: Setup, args: argparse.Namespace, names: list[str], plain_s_per_token: float = 0.0,
            reserve: list[str] | None = None) -> tuple[dict[str, Any] | None, list[str]]:
    """The shortlist side by side with plain decoding: the bench's results (what its results.json holds), or None
    where nothing was measured, and what stays open (why nothing was); a measurement cut by SIGINT or SIGTERM stops
    the tune."""
    # the bench's own report, the measurement at N streams (--parallel > 1) and the result fit inside the budget;
    # the reserve at N counts each phase's tail, from the plain probe's time per token (tune.slots plans with it)
    n_reserve = (streams.reserve_s(args.budget * 60, streams.request_s(args.parallel, args.max_tokens,
                                                                       plain_s_per_token))
                 if args.parallel > 1 and not args.predict_only else 0.0)
    minutes = (s.left() - REPORT_RESERVE_S - n_reserve) / 60
    if minutes < 0.5:
        return None, [f"{', '.join(names)}: not measured (budget spent before the measurement)"]
    opts = settings(s, args, names, minutes, plain_s_per_token, reserve)
    s.meter.update("measure", f"{', '.join(names)} side by side with plain decoding", s.left())
    out = session.measure(opts, progress.MeasureProgress(s.meter, s.left, quiet=args.quiet), say_choice=False)
    s.meter.leash.measured(out.status)  # the bench's exit 130 (SIGINT, SIGTERM) stops the tune
    if out.status != 0 or out.results is None:
        return None, [f"the side-by-side measurement ended with exit {out.status}: see {s.work / 'measure'}"]
    return out.results, []
