"""The bench as a library: :class:`~specops.bench.settings.BenchSettings` in, :class:`BenchOutcome` out, no argv
and no results file in between (``specops bench`` and ``specops tune`` both call :func:`measure`).

The run, top-down (:func:`measure`): the inputs (:mod:`~specops.bench.resolve`) → the hardware ceiling and the arms
it leaves (:mod:`~specops.bench.lineup`) → how many servers fit side by side (:mod:`~specops.bench.capacity`) → the
plan (:mod:`~specops.bench.plan`) → the paired, sequential run (:mod:`~specops.bench.runner`) → the choice (the
tune's rule, :mod:`~specops.bench.recommend`) with its A/A check, the report, results.json and the inventory variables
(:func:`report`, :mod:`~specops.bench.summary`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from specops.bench import lineup as lineups
from specops.bench import plan as plans
from specops.bench.capacity import fit_servers
from specops.bench.design import Design
from specops.bench.lineup import Lineup
from specops.bench.progress import fmt_s
from specops.bench.resolve import resolve
from specops.bench.runner import BenchConfig, BenchError, Progress
from specops.bench.runner import run as run_design
from specops.bench.settings import BenchSettings
from specops.bench.store import ResultStore, StoreError
from specops.bench.summary import Outcome, build
from specops.bench.tasks import workloads_of
from specops.bench.voice import Say, Stop


@dataclass(frozen=True)
class BenchOutcome:
    """How a bench run ended: ``status`` is ``specops bench``'s exit status (0; 1: the run failed; 2: bad input;
    130: SIGINT or SIGTERM), ``why`` the last error line said ('' for 0), ``results`` what results.json holds and
    ``report`` what was written (both None where no report was built: an error, or ``list_arms``)."""

    status: int
    why: str = ""
    results: dict[str, Any] | None = None
    report: Outcome | None = None


def measure(opts: BenchSettings, progress: Progress | None = None, say: Say | None = None,
            say_choice: bool = True) -> BenchOutcome:
    """One bench run, resumable from ``opts.work()``: the ceiling, the paired run, the report. ``progress``: where
    the blocks are reported (default: stderr; specops tune passes its own); ``say``: where its lines go;
    ``say_choice``: False where the caller says the choice itself (specops tune, after its own checks)."""
    say = say or Say()
    store = ResultStore(opts.work())
    progress = progress or Progress(quiet=opts.quiet)
    try:
        if not _run(opts, store, progress, say):
            return BenchOutcome(0)
    except Stop as stop:
        for line in stop.lines:
            say.err(line)
        return BenchOutcome(stop.code, stop.lines[-1] if stop.lines else "")
    # 3. the choice (the tune's rule), the report, the inventory variables
    return report(opts, say, say_choice)


def _run(opts: BenchSettings, store: ResultStore, progress: Progress, say: Say) -> bool:
    """The ceiling, the plan and the paired run; False where only the arms were asked for (``list_arms``)."""
    inputs = resolve(opts, store, progress)
    # 1. the ceiling, and the arms it leaves
    ceiling = lineups.ceiling(opts, store, inputs, progress, say)
    lineup = lineups.lineup(opts, inputs, ceiling.data, progress)
    cap, cap_note = fit_servers(inputs.cfg, lineup, opts.memory_mib, progress)
    # 2. the plan, and the paired, sequential run
    by_wl = {w: [t.id for t in inputs.tasks if t.workload == w] for w in workloads_of(inputs.tasks)}
    dz = plans.design_def(opts, by_wl, lineup)
    counts = {w: len(ids) for w, ids in by_wl.items()}
    plan = plans.plan(opts, inputs, lineup, dz, counts, ceiling, cap, cap_note)
    if opts.list_arms:
        for line in arm_lines(lineup):
            say.out(line)
        return False
    try:
        resumed = store.init_plan(plan)
    except StoreError as exc:
        raise Stop(2, str(exc)) from None
    cfg, reps = inputs.cfg, inputs.reps
    try:
        design = plans.design(opts, inputs, lineup, by_wl, dz)
    except ValueError as exc:  # --shares on none of the task set's workloads
        raise Stop(2, f"--shares: {exc}; nothing was run") from None
    progress.note(
        f"bench: {len(lineup.spec_arms)} arm(s) + baseline + A/A × {sum(counts.values())} tasks × {reps} rep(s), max "
        f"{opts.max_tokens} tokens, budget {fmt_s(cfg.budget_s) if cfg.budget_s else 'none'}"
        f"{' (resuming)' if resumed else ''}; results in {store.root}")
    signal.signal(signal.SIGTERM, _sigterm)
    _run_blocks(cfg, lineup, design, store, progress)
    return True


def arm_lines(lineup: Lineup) -> list[str]:
    """The arms that would run, and those the ceiling says cannot pay."""
    lines = [f"{a.name:22} {a.description}" for a in lineup.running]
    return lines + [f"{n:22} (cannot pay on this host: ceiling {c.best:.2f}×)" for n, c in lineup.cannot.items()]


def _run_blocks(cfg: BenchConfig, lineup: Lineup, design: Design, store: ResultStore, progress: Progress) -> None:
    """The paired, sequential run (what finishes is kept in the work dir), or its outcome when nothing runs."""
    work = store.root
    if lineup.spec_arms:
        try:
            run_design(cfg, {a.name: a for a in lineup.running}, design, store, progress)
        except BenchError as exc:
            raise Stop(1, str(exc), f"what finished is kept in {work}; re-run the same command to resume") from None
        except KeyboardInterrupt:
            raise Stop(130, f"interrupted; results so far kept in {work}; re-run the same command to resume") from None
    else:
        store.save_json("outcome.json", {"ended": "every arm pruned by the ceiling", "elapsed_s": 0, "blocks": 0,
                                         "status": {}})


def report(opts: BenchSettings, say: Say | None = None, say_choice: bool = True) -> BenchOutcome:
    """From the work dir to the report, results.json and the inventory variables (unless ``no_vars``), each said
    in a line; a work dir without a plan or a finished block raises FileNotFoundError, a damaged one StoreError."""
    say = say or Say()
    out = build(ResultStore(opts.work()), opts.report, opts.assets, opts.rule,
                None if opts.no_vars else opts.vars_file, opts.reference_run)
    say.out(f"report: {out.report}\nraw: {out.raw_json}")
    for wl, pk in out.picks.items() if say_choice else ():
        shown = pk.arm if pk.valid else f"{pk.arm}, not applied (the A/A check is unsound here)"
        say.out(f"chosen for {wl} (the tune's rule): {shown} — {pk.reason}")
    if out.vars_file:
        say.out(f"inventory variables: {out.vars_file}")
    return BenchOutcome(0, results=out.raw, report=out)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


__all__ = ["BenchOutcome", "BenchSettings", "Say", "measure", "report"]
