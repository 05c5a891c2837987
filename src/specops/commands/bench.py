"""``specops bench``: does speculation pay on this host? Ceiling first, then a paired, sequential run.

1. The hardware ceiling (llama-bench): arms that cannot reach 1.0× even with every draft accepted are not run.
2. The remaining arms' servers are loaded side by side (as many as memory allows) with two baselines; tasks
   alternate between them block by block, so machine drift cancels; an arm stops as soon as its interval
   decides; ``--budget`` bounds the run.
3. The choice, by the tune's rule (:func:`specops.tune.rule.decision`), with the A/A check that decides whether it
   may be applied; the report, inventory variables, ``--apply``.

The run itself is a library (:mod:`specops.bench.session`: settings in, outcome out); this module is its command
line: the options, ``--report-only`` and ``--apply``, the exit status.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from specops.bench import arms as armsmod
from specops.bench import session
from specops.bench.config import parse_rates
from specops.bench.identity import RULES
from specops.bench.inventory import ApplyError, apply
from specops.bench.runner import BenchError, Progress
from specops.bench.settings import DEFAULT_DRAFT, DEFAULT_TARGET, BenchSettings, default_model
from specops.bench.store import StoreError
from specops.bench.tasks import STANDARD_SET
from specops.bench.voice import stderr_line
from specops.knobs import spell

NAME = "bench"
HELP = "does speculation pay here? hardware ceiling, paired sequential bench, the tune's rule chooses"
D = BenchSettings()  # the defaults: the library's and the command line's are one table


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def rates_arg(text: str) -> tuple[float, ...]:
    """``--synth-rates`` (bench and tune): :func:`specops.bench.config.parse_rates` as an argparse type."""
    try:
        return parse_rates(text)
    except BenchError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _shares(text: str) -> tuple[tuple[str, float], ...]:
    """``edit=70,prose=30``: each workload's share (not normalised here; zero shares are kept and not measured)."""
    out: list[tuple[str, float]] = []
    for part in (x.strip() for x in text.split(",") if x.strip()):
        name, eq, value = part.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not eq or not name.strip() or not share >= 0:
            raise argparse.ArgumentTypeError(f"{part!r} is not workload=share (a number >= 0)")
        out.append((name.strip(), share))
    return tuple(out)


def _models_args(p: argparse.ArgumentParser) -> None:
    """The "models and build" group of options."""
    g = p.add_argument_group("models and build")
    g.add_argument("--target", type=Path, default=default_model(DEFAULT_TARGET), help="target GGUF")
    g.add_argument("--draft", type=Path, default=default_model(DEFAULT_DRAFT), help="draft GGUF")
    g.add_argument("--llama-prefix", type=Path, default=D.llama_prefix,
                   help="llama.cpp install (bin/llama-server, capabilities.json); default: $SPECOPS_LLAMA_PREFIX, "
                   "else /opt/llama.cpp/current")


def _task_args(p: argparse.ArgumentParser) -> None:
    """The "tasks" group of options."""
    g = p.add_argument_group("tasks")
    g.add_argument("--tasks", type=Path, action="append", default=[],
                   help="task JSONL file (repeatable); default: the standard set " + STANDARD_SET)
    g.add_argument("--workloads", type=_strs, default=D.workloads, help="only these workloads (comma list)")
    g.add_argument("--limit-per-workload", type=int, default=D.limit_per_workload,
                   help="first N tasks of each workload (smoke)")
    g.add_argument("--sample-every", type=int, default=D.sample_every, metavar="K",
                   help="systematic sample: tasks 1, 1+K, 1+2K, ... of each workload")


def _arm_args(p: argparse.ArgumentParser) -> None:
    """The "arms" group of options."""
    g = p.add_argument_group("arms")
    g.add_argument("--arms", default=D.arms, help="comma list of arm names, or 'standard' (see --list-arms); in "
                   "order: the first carries 70%% of the choice's error budget, as the tune's best predicted does")
    g.add_argument("--list-arms", action="store_true", help="print the arms that would run and exit")
    g.add_argument("--plain", choices=(armsmod.PLAIN_UNIT, armsmod.PLAIN_DEFAULTS), default=D.plain,
                   help="the plain decoding every ratio is against: unit (default: speculation off with the service "
                        f"role's numerics, {spell(**armsmod.unit_numerics())}, every arm with them too) or defaults "
                        "(llama.cpp's, the older baseline)")
    g.add_argument("--draft-n-max", type=_ints, default=D.draft_n_max,
                   help="draft lengths of draft-n<K> arms (e.g. 2,4,8)")
    g.add_argument("--exact-n-max", type=_ints, default=D.exact_n_max,
                   help=f"exact-profile arms ({spell(**armsmod.EXACT_CACHE)}, the service default numerics)")
    g.add_argument("--ngram", type=_strs, default=D.ngram,
                   help="n-gram arms (comma list; '' for none)")
    g.add_argument("--p-min", type=_floats, default=D.p_min, help="p-min arms (draft-n8-p<P>)")
    g.add_argument("--n-min", type=_ints, default=D.n_min, help="n-min arms (draft-n8-nmin<M>)")
    g.add_argument("--quants", type=_strs, default=D.quants, help="llama-quantize types for cheaper drafts")
    g.add_argument("--quant-n-max", type=int, default=D.quant_n_max, help="draft n-max of the re-quantised draft arms")


def _method_args(p: argparse.ArgumentParser) -> None:
    """The "method" group of options."""
    g = p.add_argument_group("method")
    g.add_argument("--budget", type=float, default=D.budget, metavar="MINUTES",
                   help="stop before a block that would end past this many minutes (default: 20, "
                   "none with --exhaustive); conclusions still open are reported as such")
    g.add_argument("--fixed-set", action="store_true",
                   help="intervals for this fixed task set (finite-population correction: with every task in, only "
                        "measurement noise is left); by default an interval is for the workload's mean speedup")
    g.add_argument("--request-guess", type=float, default=D.request_guess, metavar="SECONDS",
                   help="how long one request is expected to take, for --budget's check of the first block (by "
                        "default the first block always runs); specops tune passes its probes' figure")
    g.add_argument("--min-tasks", type=int, default=D.min_tasks, help="tasks of a workload before an arm may stop")
    g.add_argument("--stop-on", type=_strs, default=D.stop_on, metavar="STOPS",
                   help="which settled intervals may stop an arm before its workload's tasks are used up (comma list "
                   f"of {', '.join(D.stop_on)}; default all); 'slower,no gain' stops only an arm that cannot pay "
                   "there, a gain runs every task (specops tune's choice)")
    g.add_argument("--shares", type=_shares, default=D.shares, metavar="WORKLOAD=SHARE,...",
                   help="each workload's share of the traffic (specops tune passes the mix, or the task set's own "
                        "shares): a workload without one is not measured, the blocks go where share × spread settles "
                        "the whole figure soonest, and the stops look at the whole figure, weighted by time; default: "
                        "none (the workloads take turns, each stopped on its own)")
    g.add_argument("--whole-level", type=float, default=D.whole_level, metavar="LEVEL",
                   help="with --shares: the whole figure's confidence level for a futility stop (slower, no gain), "
                        "looked at after every block (default 0.99); its faster stop reads the run's error budget "
                        "(one-sided 2.5%% over every look and candidate, O'Brien-Fleming's boundary: 98%% at the "
                        "last look for one candidate, stricter before)")
    g.add_argument("--reserve", type=_strs, default=D.reserve, metavar="ARMS",
                   help="with --shares: arms of --arms held back (comma list, in order) until a measured one is on "
                        "course to clear 1 + --half-width, then measured beside it one at a time (specops tune: the "
                        "candidates that stay open)")
    g.add_argument("--half-width", type=float, default=D.half_width,
                   help="an arm stops when its interval is within ±this of its estimate, or wholly below 1 + this "
                   "(no gain worth deploying); also when wholly above or below 1.0 (default 0.05); the choice's "
                   "margin too (the tune's --margin)")
    g.add_argument("--aa-precision", type=float, default=D.aa_precision,
                   help="the A/A check stops once it has --min-tasks blocks in a workload and its pooled interval is "
                   "within ±this (default 0.025); it always runs with --exhaustive")
    g.add_argument("--exhaustive", action="store_true",
                   help="the reference run: every arm (no ceiling pruning), every task, no early stopping, "
                   "3 repetitions unless --reps")
    g.add_argument("--run-anyway", action="store_true", help="run the arms the ceiling says cannot pay")
    g.add_argument("--interleave", choices=("slices", "requests"), default=D.interleave,
                   help="slices (default): a block's requests run at once, the servers taking turns on the CPU "
                   "every --slice seconds; requests: one request after another")
    g.add_argument("--slice", type=float, default=D.slice, metavar="SECONDS", help="time slice (default 0.5)")
    g.add_argument("--recycle", type=int, default=D.recycle, metavar="BLOCKS",
                   help="reload every server, in a new order, every this many blocks (default 8; 0: never): a "
                   "server's speed differs from its twin's by ~1%% for as long as it lives")
    g.add_argument("--reps", type=int, default=D.reps, help="repetitions (default 1; 3 with --exhaustive)")
    g.add_argument("--max-tokens", type=int, default=D.max_tokens)
    g.add_argument("--seed", type=int, default=D.seed)
    g.add_argument("--threads", type=int, default=D.threads, help="server threads (default: llama.cpp's)")
    g.add_argument("--draft-threads", type=int, default=D.draft_threads,
                   help="draft model threads (default: --threads)")
    g.add_argument("--ctx-size", type=int, default=D.ctx_size)
    g.add_argument("--memory-mib", type=float, default=D.memory_mib,
                   help="memory the side-by-side servers may use (default: what the host has available: host RAM, "
                   "or GPU memory for a CUDA/ROCm build)")
    g.add_argument("--synth-rates", type=rates_arg, default=D.synth_rates, metavar="P0,P1,...|FILE",
                   help="benchmarking only: impose llama.cpp's synthetic acceptance (knob spec_synth_rates, one "
                   "unconditional rate per draft position, or a JSON file with 'rates') on every speculative arm; "
                   "speed is real, acceptance imposed, output not the target's (use --rule fastest)")


def _ceiling_args(p: argparse.ArgumentParser) -> None:
    """The "hardware ceiling" group of options."""
    g = p.add_argument_group("hardware ceiling")
    g.add_argument("--no-ceiling", action="store_true", help="skip the llama-bench hardware ceiling (no pruning)")
    g.add_argument("--ceiling-margin", type=float, default=D.ceiling_margin,
                   help="prune arms whose perfect-acceptance ceiling is below 1 + this (default 0.05)")
    g.add_argument("--ceiling-depth", type=int, default=D.ceiling_depth)
    g.add_argument("--ceiling-reps", type=int, default=D.ceiling_reps)
    g.add_argument("--ceiling-k", type=_ints, default=D.ceiling_k, help="batch sizes k measured (must include 1)")


def _result_args(p: argparse.ArgumentParser) -> None:
    """The "results" group of options."""
    g = p.add_argument_group("results")
    g.add_argument("--work-dir", type=Path, default=D.work_dir,
                   help="results (resumable); default $SPECOPS_CACHE/bench/<run-name>")
    g.add_argument("--run-name", default=D.run_name)
    g.add_argument("--fresh", action="store_true", help="discard results in the work dir first")
    g.add_argument("--report", type=Path, default=D.report)
    g.add_argument("--assets", type=Path, default=D.assets, help="raw JSON and PNG plots")
    g.add_argument("--report-only", action="store_true", help="rebuild the report from the work dir")
    g.add_argument("--reference-run", type=Path, default=D.reference_run, metavar="RESULTS_JSON",
                   help="results.json of an exhaustive run: the report says whether the picks agree")
    g.add_argument("--quiet", action="store_true")


def _recommendation_args(p: argparse.ArgumentParser) -> None:
    """The "choice" group of options."""
    g = p.add_argument_group("choice (the tune's rule)")
    g.add_argument("--rule", choices=RULES, default=D.rule,
                   help="equivalent (default): differences allowed only where explained as near-ties; identical: "
                        "byte for byte; fastest: output not judged")
    g.add_argument("--vars-file", type=Path, default=D.vars_file)
    g.add_argument("--no-vars", action="store_true", help="do not write inventory variables")
    g.add_argument("--apply", action="store_true", help="re-deploy the service with the choice")
    g.add_argument("--playbook", type=Path, default=Path("deploy.yml"))
    g.add_argument("--inventory", type=Path, action="append", default=None,
                   help="inventory for --apply (repeatable; default inventory/hosts.yml)")
    g.add_argument("--deploy-var", action="append", default=[], metavar="KEY=VALUE",
                   help="extra variable for the --apply deploy (repeatable)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _models_args(p)
    _task_args(p)
    _arm_args(p)
    _method_args(p)
    _ceiling_args(p)
    _result_args(p)
    _recommendation_args(p)


def settings(args: argparse.Namespace) -> BenchSettings:
    """The command line as the library's settings (every option of the same name; --report-only and --apply are
    the command's own)."""
    given = {f.name: getattr(args, f.name) for f in fields(BenchSettings)}
    return BenchSettings(**{**given, "tasks": tuple(args.tasks)})


def _apply(args: argparse.Namespace, out: session.BenchOutcome) -> int:
    """--apply: re-deploy with the choice's variables (none written: nothing is applied, exit 1)."""
    if not args.apply:
        return 0
    if out.report is None or not out.report.vars_file:
        stderr_line("not applying: the A/A check cannot back the choice (no variables written) or --no-vars was given")
        return 1
    try:
        extra = [x for kv in args.deploy_var for x in ("-e", kv)]
        return apply(out.report.vars_file, args.playbook, args.inventory or [Path("inventory/hosts.yml")], extra)
    except ApplyError as exc:
        stderr_line(str(exc))
        return 2


def run(args: argparse.Namespace, progress: Progress | None = None) -> int:
    """``specops bench``: the library's run (:func:`specops.bench.session.measure`), or with --report-only its
    report from the work dir; then --apply. ``progress``: where the blocks are reported (default: stderr)."""
    opts = settings(args)
    if args.report_only:
        try:
            return _apply(args, session.report(opts))
        except (FileNotFoundError, StoreError) as exc:
            stderr_line(str(exc))
            return 2
    out = session.measure(opts, progress)
    if out.status or out.report is None:  # an error (said), or --list-arms
        return out.status
    return _apply(args, out)
