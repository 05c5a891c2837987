"""``specops bench``: does speculation pay on this host? Ceiling first, then a paired, sequential run.

1. The hardware ceiling (llama-bench): arms that cannot reach 1.0× even with every draft accepted are not run.
2. The remaining arms' servers are loaded side by side (as many as memory allows) with two baselines; tasks
   alternate between them block by block, so machine drift cancels; an arm stops as soon as its interval
   decides; ``--budget`` bounds the run.
3. A/A-gated recommendation, report, inventory variables, ``--apply``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import psutil

from specops.bench import arms as armsmod
from specops.bench import ceiling as ceil
from specops.bench.arms import AA, BASELINE, Arm
from specops.bench.design import Design
from specops.bench.inventory import DEFAULT_VARS_FILE, ApplyError, apply
from specops.bench.quantize import QuantizeError, derive
from specops.bench.report import machine_info
from specops.bench.runner import BenchConfig, BenchError, Progress, fmt_s, parse_rates
from specops.bench.runner import run as run_design
from specops.bench.store import ResultStore, StoreError
from specops.bench.summary import build
from specops.bench.tasks import STANDARD_SET, Task, TaskError, load_tasks, task_set_digest, workloads_of
from specops.capabilities import Capabilities
from specops.fetch import catalog
from specops.fit import FitError, FitParams, Memory, estimate, measure_memory
from specops.ggufmeta import GGUFError
from specops.knobs import spec_type_members, spell
from specops.paths import build_backend, cache_dir, llama_prefix
from specops.room import MTP_TYPE, mtp_problems

NAME = "bench"
HELP = "does speculation pay here? hardware ceiling, paired sequential bench, A/A-gated recommendation"
MIN_SERVERS = 3  # baseline, its A/A twin, one arm


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def rates_arg(text: str) -> tuple[float, ...]:
    """``--synth-rates`` (bench and tune): :func:`specops.bench.runner.parse_rates` as an argparse type."""
    try:
        return parse_rates(text)
    except BenchError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _default_model(name: str) -> Path | None:
    try:
        return cache_dir() / "models" / catalog()[name].file
    except KeyError:
        return None


def _models_args(p: argparse.ArgumentParser) -> None:
    """The "models and build" group of options."""
    g = p.add_argument_group("models and build")
    g.add_argument("--target", type=Path, default=_default_model("qwen2.5-coder-1.5b"), help="target GGUF")
    g.add_argument("--draft", type=Path, default=_default_model("qwen2.5-coder-0.5b"), help="draft GGUF")
    g.add_argument("--llama-prefix", type=Path, default=None,
                   help="llama.cpp install (bin/llama-server, capabilities.json); default: $SPECOPS_LLAMA_PREFIX, "
                   "else /opt/llama.cpp/current")


def _task_args(p: argparse.ArgumentParser) -> None:
    """The "tasks" group of options."""
    g = p.add_argument_group("tasks")
    g.add_argument("--tasks", type=Path, action="append", default=[],
                   help="task JSONL file (repeatable); default: the standard set " + STANDARD_SET)
    g.add_argument("--workloads", type=_strs, default=(), help="only these workloads (comma list)")
    g.add_argument("--limit-per-workload", type=int, default=None, help="first N tasks of each workload (smoke)")
    g.add_argument("--sample-every", type=int, default=None, metavar="K",
                   help="systematic sample: tasks 1, 1+K, 1+2K, ... of each workload")


def _arm_args(p: argparse.ArgumentParser) -> None:
    """The "arms" group of options."""
    g = p.add_argument_group("arms")
    g.add_argument("--arms", default="standard", help="comma list of arm names, or 'standard' (see --list-arms)")
    g.add_argument("--list-arms", action="store_true", help="print the arms that would run and exit")
    g.add_argument("--plain", choices=(armsmod.PLAIN_UNIT, armsmod.PLAIN_DEFAULTS), default=armsmod.PLAIN_UNIT,
                   help="the plain decoding every ratio is against: unit (default: speculation off with the service "
                        f"role's numerics, {spell(**armsmod.unit_numerics())}, every arm with them too) or defaults "
                        "(llama.cpp's, the older baseline)")
    g.add_argument("--draft-n-max", type=_ints, default=(4,), help="draft lengths of draft-n<K> arms (e.g. 2,4,8)")
    g.add_argument("--exact-n-max", type=_ints, default=(2,),
                   help=f"exact-profile arms ({spell(**armsmod.EXACT_CACHE)}, the service default numerics)")
    g.add_argument("--ngram", type=_strs, default=("ngram-simple", "ngram-mod"),
                   help="n-gram arms (comma list; '' for none)")
    g.add_argument("--p-min", type=_floats, default=(), help="p-min arms (draft-n8-p<P>)")
    g.add_argument("--n-min", type=_ints, default=(), help="n-min arms (draft-n8-nmin<M>)")
    g.add_argument("--quants", type=_strs, default=(), help="llama-quantize types for cheaper drafts")
    g.add_argument("--quant-n-max", type=int, default=4, help="draft n-max of the re-quantised draft arms")


def _method_args(p: argparse.ArgumentParser) -> None:
    """The "method" group of options."""
    g = p.add_argument_group("method")
    g.add_argument("--budget", type=float, default=None, metavar="MINUTES",
                   help="stop before a block that would end past this many minutes (default: 20, "
                   "none with --exhaustive); conclusions still open are reported as such")
    g.add_argument("--fixed-set", action="store_true",
                   help="intervals for this fixed task set (finite-population correction: with every task in, only "
                        "measurement noise is left); by default an interval speaks for a new request of the workload")
    g.add_argument("--request-guess", type=float, default=None, metavar="SECONDS",
                   help="how long one request is expected to take, for --budget's check of the first block (by "
                        "default the first block always runs); specops tune passes its probes' figure")
    g.add_argument("--min-tasks", type=int, default=4, help="tasks of a workload before an arm may stop")
    g.add_argument("--half-width", type=float, default=0.05,
                   help="an arm stops when its interval is within ±this of its estimate, or wholly below 1 + this "
                   "(no gain worth deploying); also when wholly above or below 1.0 (default 0.05)")
    g.add_argument("--aa-precision", type=float, default=0.025,
                   help="the A/A check stops once it has --min-tasks blocks in a workload and its pooled interval is "
                   "within ±this (default 0.025); it always runs with --exhaustive")
    g.add_argument("--exhaustive", action="store_true",
                   help="the reference run: every arm (no ceiling pruning), every task, no early stopping, "
                   "3 repetitions unless --reps")
    g.add_argument("--run-anyway", action="store_true", help="run the arms the ceiling says cannot pay")
    g.add_argument("--interleave", choices=("slices", "requests"), default="slices",
                   help="slices (default): a block's requests run at once, the servers taking turns on the CPU "
                   "every --slice seconds; requests: one request after another")
    g.add_argument("--slice", type=float, default=0.5, metavar="SECONDS", help="time slice (default 0.5)")
    g.add_argument("--recycle", type=int, default=8, metavar="BLOCKS",
                   help="reload every server, in a new order, every this many blocks (default 8; 0: never): a "
                   "server's speed differs from its twin's by ~1%% for as long as it lives")
    g.add_argument("--reps", type=int, default=None, help="repetitions (default 1; 3 with --exhaustive)")
    g.add_argument("--max-tokens", type=int, default=192)
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--threads", type=int, default=None, help="server threads (default: llama.cpp's)")
    g.add_argument("--draft-threads", type=int, default=None, help="draft model threads (default: --threads)")
    g.add_argument("--ctx-size", type=int, default=4096)
    g.add_argument("--memory-mib", type=float, default=None,
                   help="memory the side-by-side servers may use (default: what the host has available: host RAM, "
                   "or GPU memory for a CUDA/ROCm build)")
    g.add_argument("--synth-rates", type=rates_arg, default=(), metavar="P0,P1,...|FILE",
                   help="benchmarking only: impose llama.cpp's synthetic acceptance (knob spec_synth_rates, one "
                   "unconditional rate per draft position, or a JSON file with 'rates') on every speculative arm; "
                   "speed is real, acceptance imposed, output not the target's (use --rule fastest)")


def _ceiling_args(p: argparse.ArgumentParser) -> None:
    """The "hardware ceiling" group of options."""
    g = p.add_argument_group("hardware ceiling")
    g.add_argument("--no-ceiling", action="store_true", help="skip the llama-bench hardware ceiling (no pruning)")
    g.add_argument("--ceiling-margin", type=float, default=0.05,
                   help="prune arms whose perfect-acceptance ceiling is below 1 + this (default 0.05)")
    g.add_argument("--ceiling-depth", type=int, default=256)
    g.add_argument("--ceiling-reps", type=int, default=3)
    g.add_argument("--ceiling-k", type=_ints, default=ceil.KS, help="batch sizes k measured (must include 1)")


def _result_args(p: argparse.ArgumentParser) -> None:
    """The "results" group of options."""
    g = p.add_argument_group("results")
    g.add_argument("--work-dir", type=Path, default=None,
                   help="results (resumable); default $SPECOPS_CACHE/bench/<run-name>")
    g.add_argument("--run-name", default="default")
    g.add_argument("--fresh", action="store_true", help="discard results in the work dir first")
    g.add_argument("--report", type=Path, default=Path("reports/speculative_benchmark.md"))
    g.add_argument("--assets", type=Path, default=Path("reports/bench"), help="raw JSON and PNG plots")
    g.add_argument("--report-only", action="store_true", help="rebuild the report from the work dir")
    g.add_argument("--reference-run", type=Path, default=None, metavar="RESULTS_JSON",
                   help="results.json of an exhaustive run: the report says whether the picks agree")
    g.add_argument("--quiet", action="store_true")


def _recommendation_args(p: argparse.ArgumentParser) -> None:
    """The "recommendation" group of options."""
    g = p.add_argument_group("recommendation")
    g.add_argument("--rule", choices=("identical", "fastest"), default="identical")
    g.add_argument("--vars-file", type=Path, default=DEFAULT_VARS_FILE)
    g.add_argument("--no-vars", action="store_true", help="do not write inventory variables")
    g.add_argument("--apply", action="store_true", help="re-deploy the service with the recommendation")
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


def _err(msg: str) -> None:
    print(f"specops bench: {msg}", file=sys.stderr, flush=True)


def arm_names(args: argparse.Namespace) -> list[str]:
    if args.arms.strip() == "standard":
        return armsmod.standard_arm_names(
            n_max=args.draft_n_max, p_min=args.p_min, n_min=args.n_min, quants=args.quants,
            quant_n_max=args.quant_n_max, exact_n_max=args.exact_n_max, ngram=args.ngram,
        )
    return [a for a in args.arms.split(",") if a.strip()]


def _report(args: argparse.Namespace, store: ResultStore) -> int:
    out = build(store, args.report, args.assets, args.rule, None if args.no_vars else args.vars_file,
                args.reference_run)
    print(f"report: {out.report}\nraw: {out.raw_json}")
    for wl, pk in out.picks.items():
        shown = pk.arm if pk.valid else "nothing (run invalid)"
        print(f"recommended for {wl}: {shown} — {pk.reason}")
    if out.vars_file:
        print(f"inventory variables: {out.vars_file}")
    if args.apply:
        if not out.vars_file:
            _err("not applying: the run recommends nothing (invalid A/A check) or --no-vars was given")
            return 1
        try:
            extra = [x for kv in args.deploy_var for x in ("-e", kv)]
            return apply(out.vars_file, args.playbook, args.inventory or [Path("inventory/hosts.yml")], extra)
        except ApplyError as exc:
            _err(str(exc))
            return 2
    return 0


def _measure_ceiling(args: argparse.Namespace, prefix: Path, arms: list[Arm], drafts: dict[str, Path],
                     progress: Progress) -> tuple[dict[str, Any] | None, str]:
    bench_bin = prefix / "bin" / "llama-bench"
    if not bench_bin.exists():
        return None, (f"{bench_bin} is missing (build the llama-bench target): the hardware ceiling was not "
                      "measured, so no arm was pruned")
    if 1 not in args.ceiling_k:
        raise BenchError("--ceiling-k must include 1 (one decode step is the unit)")
    nums: dict[str, ceil.Numerics] = {}
    need: dict[str, int] = {}  # the largest verified batch each numerics setting's arms can use
    for a in arms:
        num = ceil.Numerics.of_profile(a.profile, a.env)
        nums[num.name] = num
        k = ceil.arm_n_max(a.profile) + 1 if a.speculative else 2
        need[num.name] = max(need.get(num.name, 2), k)
    draft_k = max([ceil.arm_n_max(a.profile) + 1 for a in arms if a.draft is not None] or [2])
    try:
        data = ceil.measure(bench_bin, Path(args.target), list(nums.values()), drafts, args.ceiling_depth,
                            args.ceiling_reps, args.threads, progress.note, ks=sorted(set(args.ceiling_k)),
                            ks_for=need, draft_k_max=draft_k)
    except ceil.CeilingError as exc:
        return None, f"hardware ceiling not measured: {str(exc).splitlines()[0]}"
    return data, ""


def _capacity(args: argparse.Namespace, cfg: BenchConfig, arms: list[Arm]) -> tuple[int, str]:
    """How many of the servers fit side by side (the memory fit of each, shared model pages counted once)."""
    if cfg.gpu:  # every server holds its own copy of the weights on the GPU
        try:
            memory = measure_memory(cfg.backend, memory_mib=args.memory_mib)
        except FitError as exc:
            raise BenchError(f"GPU memory: {exc}") from exc
    else:
        vm = psutil.virtual_memory()
        memory = Memory("host RAM", int(args.memory_mib * 2**20) if args.memory_mib else int(vm.available),
                        int(vm.total), "given" if args.memory_mib else "psutil (available)")
    avail = memory.available
    needs: list[int] = []
    files: dict[str, int] = {}
    for arm in arms:
        prof = cfg.profile_for(arm)
        draft = cfg.draft_for(arm)
        params = FitParams(ctx_size=cfg.ctx_size, cache_type_k=prof.cache_type_k or "f16",
                           cache_type_v=prof.cache_type_v or "f16", flash_attn=prof.flash_attn != "off",
                           draft_n_max=prof.draft_n_max or ceil.DEFAULT_DRAFT_N_MAX)
        try:
            rep = estimate(cfg.target, draft, params, memory)
        except (FitError, GGUFError) as exc:
            raise BenchError(f"memory fit for {arm.name}: {exc}") from exc
        needs.append(rep.needed)  # its weights stand for its private (repacked) copy
        for path in (cfg.target, draft):
            if path is not None and not cfg.gpu:
                files[str(path)] = Path(path).stat().st_size  # page cache, shared by all servers
    room = avail - sum(files.values()) - max(512 * 2**20, avail // 10)
    n, used = 0, 0
    for need in sorted(needs, reverse=True):  # the largest first: a bound that holds for any order
        if used + need > room:
            break
        used, n = used + need, n + 1
    per = max(needs) / 2**20
    note = (f"memory fit: {n} of {len(arms)} servers fit side by side in {avail / 2**30:.1f} GiB of {memory.kind} "
            f"(largest {per:,.0f} MiB each, model files {sum(files.values()) / 2**30:.1f} GiB shared)")
    return n, note


class _Stop(Exception):
    """``run`` ends early: the reason is already printed, ``code`` is the exit status."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _fail(msg: str, code: int = 2) -> NoReturn:
    _err(msg)
    raise _Stop(code)


@dataclass
class _Inputs:
    """What the command line resolves to before anything is measured."""

    reps: int
    selected: list[Arm]
    tasks: list[Task]
    prefix: Path
    caps: Capabilities
    needs_draft: bool
    derived: dict[str, Path]  # re-quantised drafts: type → GGUF
    cfg: BenchConfig
    arm_defs: dict[str, dict[str, Any]]


@dataclass
class _Ceiling:
    """The hardware ceiling as this run has it: measured now, kept from the first run, skipped or missing."""

    data: dict[str, Any] | None
    note: str
    seconds: float


@dataclass
class _Lineup:
    """The arms that run once the ceiling has pruned those that cannot pay."""

    running: list[Arm]
    spec_arms: list[str]
    refs: dict[str, list[str]]  # identity reference → the running arms that refer to it
    cannot: dict[str, ceil.ArmCeiling]
    arm_ceilings: dict[str, dict[str, Any]]
    run_anyway: bool


def _check_numbers(args: argparse.Namespace, reps: int, budget_min: float | None) -> None:
    if reps < 1 or args.max_tokens < 1 or args.min_tasks < 2 or not 0 < args.half_width < 1:
        _fail("--reps and --max-tokens must be >= 1, --min-tasks >= 2, --half-width within (0, 1)")
    if budget_min is not None and budget_min <= 0:
        _fail("--budget must be a positive number of minutes")
    if not 0.05 <= args.slice <= 10 or args.recycle < 0:
        _fail("--slice must be between 0.05 and 10 seconds, --recycle >= 0")


def _check_models(args: argparse.Namespace, needs_draft: bool) -> None:
    if args.target is None:
        _fail("--target is required")
    for label, path in (("target", args.target), ("draft", args.draft if needs_draft else None)):
        if path is not None and not Path(path).exists():
            _fail(f"{label} model {path} not found (specops fetch-model …)")


def _derive_drafts(args: argparse.Namespace, prefix: Path, selected: list[Arm], progress: Progress) -> dict[str, Path]:
    derived: dict[str, Path] = {}
    for q in sorted({a.draft for a in selected if a.draft not in (None, "draft")}):  # type: ignore[type-var]
        progress.note(f"deriving draft {q} with llama-quantize (cached)")
        try:
            derived[str(q)] = derive(prefix / "bin" / "llama-quantize", Path(args.draft), str(q))
        except QuantizeError as exc:
            _fail(str(exc), 1)
    return derived


def _resolve_inputs(args: argparse.Namespace, store: ResultStore, progress: Progress) -> _Inputs:
    """Arms, tasks, the llama.cpp build, the models and the derived drafts; a bad one ends the run."""
    reps = args.reps if args.reps is not None else (3 if args.exhaustive else 1)
    budget_min = args.budget if args.budget is not None else (None if args.exhaustive else 20.0)
    try:
        selected = armsmod.select_arms(arm_names(args), args.plain)
        tasks = load_tasks(args.tasks, list(args.workloads) or None, args.limit_per_workload, args.sample_every)
    except (armsmod.ArmError, TaskError) as exc:
        _fail(str(exc))
    _check_numbers(args, reps, budget_min)
    prefix = llama_prefix(args.llama_prefix)
    server_bin, caps_file = prefix / "bin" / "llama-server", prefix / "capabilities.json"
    if not server_bin.exists() or not caps_file.exists():
        _fail(f"no llama.cpp build at {prefix} (need bin/llama-server and capabilities.json); "
              "build it with playbooks/build.yml or pass --llama-prefix")
    caps = Capabilities.load(caps_file)
    needs_draft = any(a.draft is not None for a in selected)
    _check_models(args, needs_draft)
    mtp = [a.name for a in selected if MTP_TYPE in spec_type_members(a.profile.get("spec_type"))]
    if mtp and mtp_problems(MTP_TYPE, args.target):
        _fail(f"arm{'s' if len(mtp) > 1 else ''} {', '.join(mtp)} draft with the target's own MTP head, but "
              f"{Path(args.target).name} has no MTP layers (<arch>.nextn_predict_layers in its GGUF header): leave "
              "them out or bench an MTP-headed target")
    if args.fresh and store.root.exists():
        store.init_plan({}, fresh=True)  # clears results, keeps nothing of the old plan
        store.plan_path.unlink(missing_ok=True)

    derived = _derive_drafts(args, prefix, selected, progress)
    cfg = BenchConfig(
        target=Path(args.target), draft=Path(args.draft) if args.draft else None, server_binary=server_bin,
        caps=caps, tasks=tasks, max_tokens=args.max_tokens, seed=args.seed, reps=reps, threads=args.threads,
        draft_threads=args.draft_threads if args.draft_threads is not None else args.threads,
        ctx_size=args.ctx_size, derived_drafts=derived,
        budget_s=budget_min * 60 if budget_min is not None else None, request_guess_s=args.request_guess,
        interleave=args.interleave, slice_s=args.slice, recycle=args.recycle or None,
        backend=build_backend(prefix), synth_rates=tuple(args.synth_rates),
    )
    arm_defs = {a.name: a.to_dict() for a in selected}
    return _Inputs(reps=reps, selected=selected, tasks=tasks, prefix=prefix, caps=caps, needs_draft=needs_draft,
                   derived=derived, cfg=cfg, arm_defs=arm_defs)


def _ceiling(args: argparse.Namespace, store: ResultStore, inputs: _Inputs, progress: Progress) -> _Ceiling:
    """The ceiling (kept in the work dir: a resumed run prunes exactly as the first one did)."""
    ceiling = store.load_json("ceiling.json")
    ceiling_note = ""
    ceiling_s = (store.load_plan() or {}).get("ceiling_s", 0.0)
    if ceiling is None and not args.no_ceiling:
        drafts = {"draft": Path(args.draft)} if inputs.needs_draft and args.draft else {}
        drafts.update(inputs.derived)
        t0 = time.monotonic()
        try:
            ceiling, ceiling_note = _measure_ceiling(args, inputs.prefix, inputs.selected, drafts, progress)
        except BenchError as exc:
            _fail(str(exc))
        ceiling_s = time.monotonic() - t0
        if ceiling is not None:
            store.save_json("ceiling.json", ceiling)
        else:
            _err(ceiling_note)
    elif args.no_ceiling:
        ceiling, ceiling_note = None, "skipped (--no-ceiling)"
    return _Ceiling(ceiling, ceiling_note, ceiling_s)


def _lineup(args: argparse.Namespace, inputs: _Inputs, ceiling: dict[str, Any] | None,
            progress: Progress) -> _Lineup:
    """Prune the arms that cannot pay (unless run anyway) and the identity references no running arm needs."""
    arm_defs, selected = inputs.arm_defs, inputs.selected
    keep, cannot = ceil.prune({n: d for n, d in arm_defs.items() if n not in (BASELINE, AA)}, ceiling,
                              args.ceiling_margin)
    arm_ceilings = {}
    for name, d in arm_defs.items():
        ac = ceil.arm_ceiling(name, d, ceiling) if ceiling and d["profile"].get("spec_type") != "none" else None
        if ac is not None:
            arm_ceilings[name] = ac.to_dict()
    run_anyway = args.run_anyway or args.exhaustive
    for name, ac in cannot.items():
        progress.note(f"ceiling: {name} cannot pay on this host (best {ac.best:.2f}× at draft length {ac.at_k}, "
                      f"draft cost {ac.draft_cost:.2f})" + ("; running it anyway" if run_anyway else "; not run"))
    running = [a for a in selected if a.name in (BASELINE, AA) or a.name in keep or run_anyway]
    spec_arms = [a.name for a in running if a.name not in (BASELINE, AA)]
    # an identity reference (exact-baseline) is only needed while an arm that refers to it runs
    refs = {a.name: [b.name for b in running if b.reference == a.name and b.name != a.name]
            for a in running if a.name not in (BASELINE, AA)}
    refs = {r: d for r, d in refs.items() if d}
    orphan = [r for r in spec_arms if arm_defs[r]["profile"].get("spec_type") == "none" and r not in refs]
    running = [a for a in running if a.name not in orphan]
    spec_arms = [a for a in spec_arms if a not in orphan]
    if not spec_arms:
        progress.note("every speculative arm was pruned by the ceiling: nothing can pay on this host")
    return _Lineup(running=running, spec_arms=spec_arms, refs=refs, cannot=cannot, arm_ceilings=arm_ceilings,
                   run_anyway=run_anyway)


def _fit_servers(args: argparse.Namespace, cfg: BenchConfig, lineup: _Lineup, progress: Progress) -> tuple[int, str]:
    """How many servers run side by side (``cfg.capacity``); too few for the paired design ends the run."""
    try:
        cap, cap_note = _capacity(args, cfg, lineup.running)
    except BenchError as exc:
        _fail(str(exc))
    if lineup.spec_arms and cap < MIN_SERVERS:
        _fail(f"{cap_note}: the paired design needs at least {MIN_SERVERS} (baseline, its A/A twin, one arm). "
              "Free memory, use smaller models or a smaller --ctx-size")
    cfg.capacity = cap
    if cap < len(lineup.running):
        cap_note += "; the others wait for room (fewer run at once)"
        progress.note(cap_note)
    return cap, cap_note


def _design_def(args: argparse.Namespace, by_wl: dict[str, list[str]], lineup: _Lineup) -> dict[str, Any]:
    return {
        "arms": lineup.spec_arms, "tasks": by_wl, "min_tasks": None if args.exhaustive else args.min_tasks,
        "half_width": args.half_width, "references": lineup.refs, "exhaustive": args.exhaustive,
        "run_anyway": lineup.run_anyway, "fpc": args.fixed_set, "aa_precision": args.aa_precision,
        "identity_stop": args.rule == "identical" and not args.exhaustive,
    }


def _plan(args: argparse.Namespace, inputs: _Inputs, lineup: _Lineup, design_def: dict[str, Any],
          counts: dict[str, int], ceiling: _Ceiling, cap: int, cap_note: str) -> dict[str, Any]:
    """The plan the work dir records (a resumed run must match it) and the report reads."""
    tasks, cfg, derived, caps, prefix = inputs.tasks, inputs.cfg, inputs.derived, inputs.caps, inputs.prefix
    reps, running, selected, cannot = inputs.reps, lineup.running, inputs.selected, lineup.cannot
    return {
        "plain": args.plain, "plain_reference": armsmod.plain_description(args.plain),
        "task_set": STANDARD_SET if not args.tasks else ",".join(str(p) for p in args.tasks),
        "task_set_digest": task_set_digest(tasks), "workload_counts": counts,
        "limited": args.limit_per_workload is not None or bool(args.workloads), "sample_every": args.sample_every,
        "max_tokens": args.max_tokens, "seed": args.seed, "reps": reps, "threads": args.threads,
        "draft_threads": cfg.draft_threads, "ctx_size": args.ctx_size, "target": str(args.target),
        "target_size": Path(args.target).stat().st_size, "draft": str(args.draft) if args.draft else None,
        "draft_size": Path(args.draft).stat().st_size if args.draft and Path(args.draft).exists() else 0,
        "derived_drafts": {q: {"path": str(p), "size": p.stat().st_size} for q, p in derived.items()},
        "build_commit": caps.commit, "compiler": caps.compiler, "llama_prefix": str(prefix.resolve()),
        "arms": [a.name for a in running], "arm_defs": [a.to_dict() for a in selected],
        "design": design_def, "budget_s": cfg.budget_s, "interleave": args.interleave, "slice_s": args.slice,
        "recycle": args.recycle,
        "ceiling_margin": args.ceiling_margin,
        "ceiling_s": round(ceiling.seconds, 1), "ceiling_note": ceiling.note, "arm_ceilings": lineup.arm_ceilings,
        "pruned": {n: c.to_dict() for n, c in cannot.items()}, "capacity": cap, "capacity_note": cap_note,
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine_info(),
        "tasks": [t.to_dict() for t in tasks],
    }


def _list_arms(lineup: _Lineup) -> None:
    for a in lineup.running:
        print(f"{a.name:22} {a.description}")
    for n, c in lineup.cannot.items():
        print(f"{n:22} (cannot pay on this host: ceiling {c.best:.2f}×)")


def _run_blocks(cfg: BenchConfig, lineup: _Lineup, design: Design, store: ResultStore, work: Path,
                progress: Progress) -> None:
    """The paired, sequential run (what finishes is kept in the work dir), or its outcome when nothing runs."""
    if lineup.spec_arms:
        try:
            run_design(cfg, {a.name: a for a in lineup.running}, design, store, progress)
        except BenchError as exc:
            _err(str(exc))
            _fail(f"what finished is kept in {work}; re-run the same command to resume", 1)
        except KeyboardInterrupt:
            _fail(f"interrupted; results so far kept in {work}; re-run the same command to resume", 130)
    else:
        store.save_json("outcome.json", {"ended": "every arm pruned by the ceiling", "elapsed_s": 0, "blocks": 0,
                                         "status": {}})


def run(args: argparse.Namespace, progress: Progress | None = None) -> int:
    """``progress``: where the blocks are reported (default: stderr; specops tune passes its own)."""
    work = args.work_dir or cache_dir() / "bench" / args.run_name
    store = ResultStore(work)
    progress = progress or Progress(quiet=args.quiet)
    if args.report_only:
        try:
            return _report(args, store)
        except (FileNotFoundError, StoreError) as exc:
            _err(str(exc))
            return 2
    try:
        inputs = _resolve_inputs(args, store, progress)
        # 1. the ceiling, and the arms it leaves
        ceiling = _ceiling(args, store, inputs, progress)
        lineup = _lineup(args, inputs, ceiling.data, progress)
        cap, cap_note = _fit_servers(args, inputs.cfg, lineup, progress)
        # 2. the plan, and the paired, sequential run
        by_wl = {w: [t.id for t in inputs.tasks if t.workload == w] for w in workloads_of(inputs.tasks)}
        design_def = _design_def(args, by_wl, lineup)
        counts = {w: len(ids) for w, ids in by_wl.items()}
        plan = _plan(args, inputs, lineup, design_def, counts, ceiling, cap, cap_note)
        if args.list_arms:
            _list_arms(lineup)
            return 0
        try:
            resumed = store.init_plan(plan)
        except StoreError as exc:
            _fail(str(exc))
        cfg, reps, spec_arms, refs = inputs.cfg, inputs.reps, lineup.spec_arms, lineup.refs
        design = Design(spec_arms, by_wl, reps=reps, min_tasks=design_def["min_tasks"], half_width=args.half_width,
                        seed=args.seed, references=refs, aa_precision=args.aa_precision, fpc=design_def["fpc"],
                        identity_stop=design_def["identity_stop"])
        total = sum(counts.values())
        progress.note(
            f"bench: {len(spec_arms)} arm(s) + baseline + A/A × {total} tasks × {reps} rep(s), max {args.max_tokens} "
            f"tokens, budget {fmt_s(cfg.budget_s) if cfg.budget_s else 'none'}"
            f"{' (resuming)' if resumed else ''}; results in {work}")
        signal.signal(signal.SIGTERM, _sigterm)
        _run_blocks(cfg, lineup, design, store, work, progress)
    except _Stop as stop:
        return stop.code
    # 3. the recommendation, the report, the inventory variables, --apply
    return _report(args, store)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt

