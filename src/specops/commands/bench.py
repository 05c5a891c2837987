"""``specops bench``: measure speculative decoding against baseline, check identity, recommend, apply."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from specops.bench import arms as armsmod
from specops.bench import ceiling as ceil
from specops.bench.inventory import DEFAULT_VARS_FILE, ApplyError, apply
from specops.bench.quantize import QuantizeError, derive
from specops.bench.report import machine_info
from specops.bench.runner import BenchConfig, BenchError, Progress, run_bench, run_server_arm, wait_for_quiet
from specops.bench.speculative_cli import CliError, render_prompts, run_cli_arm
from specops.bench.store import ResultStore, StoreError
from specops.bench.summary import build
from specops.bench.tasks import STANDARD_SET, TaskError, load_tasks, task_set_digest, workloads_of
from specops.capabilities import Capabilities
from specops.fetch import catalog
from specops.paths import cache_dir
from specops.profile import ServerProfile
from specops.server import ServerProcess, ServerStartError

NAME = "bench"
HELP = "benchmark speculative decoding arms against baseline, check output identity, recommend settings"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _strs(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _default_model(name: str) -> Path | None:
    try:
        return cache_dir() / "models" / catalog()[name].file
    except KeyError:
        return None


def _default_prefix() -> Path:
    env = os.environ.get("SPECOPS_LLAMA_PREFIX")
    if env:
        return Path(env)
    for cand in (cache_dir() / "lab" / "opt" / "llama.cpp" / "current", Path("/opt/llama.cpp/current")):
        if (cand / "bin" / "llama-server").exists():
            return cand
    return cache_dir() / "lab" / "opt" / "llama.cpp" / "current"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models and build")
    g.add_argument("--target", type=Path, default=_default_model("qwen2.5-coder-1.5b"), help="target GGUF")
    g.add_argument("--draft", type=Path, default=_default_model("qwen2.5-coder-0.5b"), help="draft GGUF")
    g.add_argument(
        "--llama-prefix",
        type=Path,
        default=None,
        help="llama.cpp install (bin/llama-server, capabilities.json); default: the lab build "
        "or /opt/llama.cpp/current",
    )
    g = p.add_argument_group("tasks")
    g.add_argument(
        "--tasks",
        type=Path,
        action="append",
        default=[],
        help="task JSONL file (repeatable); default: the standard set " + STANDARD_SET,
    )
    g.add_argument("--workloads", type=_strs, default=(), help="only these workloads (comma list)")
    g.add_argument("--limit-per-workload", type=int, default=None, help="first N tasks of each workload (smoke)")
    g.add_argument("--sample-every", type=int, default=None, metavar="K",
                   help="systematic sample: tasks 1, 1+K, 1+2K, ... of each workload (keeps each file's mix; "
                   "for machines too slow for the whole set)")
    g = p.add_argument_group("arms")
    g.add_argument("--arms", default="standard", help="comma list of arm names, or 'standard' (see --list-arms)")
    g.add_argument("--list-arms", action="store_true", help="print the standard arms and exit")
    g.add_argument("--draft-n-max", type=_ints, default=(4, 8, 16), help="draft lengths of draft-n<K> arms")
    g.add_argument("--p-min", type=_floats, default=(0.8,), help="p-min arms (draft-n8-p<P>)")
    g.add_argument("--n-min", type=_ints, default=(2,), help="n-min arms (draft-n8-nmin<M>)")
    g.add_argument(
        "--quants",
        type=_strs,
        default=armsmod.DEFAULT_QUANTS,
        help="llama-quantize types for cheaper drafts ('' for none)",
    )
    g.add_argument("--quant-n-max", type=int, default=4, help="draft n-max of the re-quantised draft arms")
    g.add_argument("--exact-n-max", type=_ints, default=(2,), help="exact-profile arms (-fa on -ctv q8_0)")
    g.add_argument(
        "--exact-nr-n-max", type=_ints, default=(3, 8), help="exact + --no-repack + GGML_CPU_TILED_MM=0 arms"
    )
    g.add_argument("--no-cli", action="store_true", help="skip the llama-speculative cross-check arm")
    g = p.add_argument_group("method")
    g.add_argument("--reps", type=int, default=3, help="repetitions (arms interleaved)")
    g.add_argument("--max-tokens", type=int, default=192)
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--threads", type=int, default=None, help="server threads (default: llama.cpp's)")
    g.add_argument("--draft-threads", type=int, default=None, help="draft model threads (default: --threads)")
    g.add_argument("--ctx-size", type=int, default=4096)
    g.add_argument(
        "--max-busy",
        type=float,
        default=None,
        help="before each arm-repetition wait until other work uses at most this %% of the CPUs "
        "(shared machines; what was seen is recorded either way)",
    )
    g.add_argument("--idle-timeout", type=float, default=1800.0, help="longest wait for --max-busy (s)")
    g.add_argument("--no-ceiling", action="store_true", help="skip the llama-bench hardware ceiling")
    g.add_argument("--ceiling-depth", type=int, default=256)
    g.add_argument("--ceiling-reps", type=int, default=5)
    g.add_argument("--ceiling-k-max", type=int, default=17, help="largest batch k measured (>= 2)")
    g = p.add_argument_group("results")
    g.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="per-arm results (resumable); default $SPECOPS_CACHE/bench/<run-name>",
    )
    g.add_argument("--run-name", default="default")
    g.add_argument("--fresh", action="store_true", help="discard results in the work dir first")
    g.add_argument("--report", type=Path, default=Path("reports/speculative_benchmark.md"))
    g.add_argument("--assets", type=Path, default=Path("reports/bench"), help="raw JSON and PNG plots")
    g.add_argument("--report-only", action="store_true", help="rebuild the report from the work dir")
    g.add_argument("--quiet", action="store_true")
    g = p.add_argument_group("recommendation")
    g.add_argument("--rule", choices=("identical", "fastest"), default="identical")
    g.add_argument("--vars-file", type=Path, default=DEFAULT_VARS_FILE)
    g.add_argument("--no-vars", action="store_true", help="do not write inventory variables")
    g.add_argument("--apply", action="store_true", help="re-deploy the service with the recommendation")
    g.add_argument("--playbook", type=Path, default=Path("deploy.yml"))
    g.add_argument("--inventory", type=Path, action="append", default=None,
                   help="inventory for --apply (repeatable; default inventory/hosts.yml)")
    g.add_argument("--deploy-var", action="append", default=[], metavar="KEY=VALUE",
                   help="extra variable for the --apply deploy (repeatable), e.g. llama_cpp_install_root=/opt/x")


def _err(msg: str) -> None:
    print(f"specops bench: {msg}", file=sys.stderr, flush=True)


def arm_names(args: argparse.Namespace) -> list[str]:
    if args.arms.strip() == "standard":
        return armsmod.standard_arm_names(
            n_max=args.draft_n_max,
            p_min=args.p_min,
            n_min=args.n_min,
            quants=args.quants,
            quant_n_max=args.quant_n_max,
            exact_n_max=args.exact_n_max,
            exact_nr_n_max=args.exact_nr_n_max,
            cli=not args.no_cli,
        )
    return [a for a in args.arms.split(",") if a.strip()]


def _report(args: argparse.Namespace, store: ResultStore, partial: bool = False) -> int:
    out = build(
        store,
        args.report,
        args.assets,
        args.rule,
        None if args.no_vars else args.vars_file,
        include_partial=partial,
    )
    print(f"report: {out.report}\nraw: {out.raw_json}")
    for wl, pk in out.picks.items():
        print(f"recommended for {wl}: {pk.arm} — {pk.reason}")
    if out.vars_file:
        print(f"inventory variables: {out.vars_file}")
    if args.apply and out.vars_file:
        try:
            extra = [x for kv in args.deploy_var for x in ("-e", kv)]
            return apply(out.vars_file, args.playbook, args.inventory or [Path("inventory/hosts.yml")], extra)
        except ApplyError as exc:
            _err(str(exc))
            return 2
    return 0


def run(args: argparse.Namespace) -> int:
    work = args.work_dir or cache_dir() / "bench" / args.run_name
    store = ResultStore(work)
    if args.list_arms:
        for a in armsmod.select_arms(arm_names(args)):
            print(f"{a.name:22} {a.description}")
        return 0
    if args.report_only:
        try:
            return _report(args, store, partial=True)
        except FileNotFoundError as exc:
            _err(str(exc))
            return 2
    try:
        arms = armsmod.select_arms(arm_names(args))
        tasks = load_tasks(args.tasks, list(args.workloads) or None, args.limit_per_workload, args.sample_every)
    except (armsmod.ArmError, TaskError) as exc:
        _err(str(exc))
        return 2
    if args.reps < 1 or args.max_tokens < 1:
        _err("--reps and --max-tokens must be >= 1")
        return 2
    prefix = args.llama_prefix or _default_prefix()
    server_bin = prefix / "bin" / "llama-server"
    caps_file = prefix / "capabilities.json"
    if not server_bin.exists() or not caps_file.exists():
        _err(
            f"no llama.cpp build at {prefix} (need bin/llama-server and capabilities.json); "
            "build it with playbooks/build.yml or pass --llama-prefix"
        )
        return 2
    caps = Capabilities.load(caps_file)
    needs_draft = any(a.draft is not None for a in arms)
    for label, path in (("target", args.target), ("draft", args.draft if needs_draft else None)):
        if path is not None and not Path(path).exists():
            _err(f"{label} model {path} not found (specops fetch-model …)")
            return 2
    if args.target is None:
        _err("--target is required")
        return 2

    progress = Progress(args.reps * len(arms) * len(tasks), quiet=args.quiet)
    derived: dict[str, Path] = {}
    for q in sorted({a.draft for a in arms if a.draft not in (None, "draft")}):  # type: ignore[type-var]
        progress.note(f"deriving draft {q} with llama-quantize (cached)")
        try:
            derived[str(q)] = derive(prefix / "bin" / "llama-quantize", Path(args.draft), str(q))
        except QuantizeError as exc:
            _err(str(exc))
            return 1

    cfg = BenchConfig(
        target=Path(args.target),
        draft=Path(args.draft) if args.draft else None,
        server_binary=server_bin,
        caps=caps,
        tasks=tasks,
        max_tokens=args.max_tokens,
        seed=args.seed,
        reps=args.reps,
        threads=args.threads,
        draft_threads=args.draft_threads if args.draft_threads is not None else args.threads,
        ctx_size=args.ctx_size,
        derived_drafts=derived,
        speculative_binary=prefix / "bin" / "llama-speculative",
        max_busy=args.max_busy,
        idle_timeout=args.idle_timeout,
    )
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.workload] = counts.get(t.workload, 0) + 1
    plan: dict[str, Any] = {
        "task_set": STANDARD_SET if not args.tasks else ",".join(str(p) for p in args.tasks),
        "task_set_digest": task_set_digest(tasks),
        "workload_counts": {w: counts[w] for w in workloads_of(tasks)},
        "limited": args.limit_per_workload is not None or bool(args.workloads),
        "sample_every": args.sample_every,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "reps": args.reps,
        "threads": args.threads,
        "draft_threads": args.draft_threads if args.draft_threads is not None else args.threads,
        "ctx_size": args.ctx_size,
        "target": str(args.target),
        "target_size": Path(args.target).stat().st_size,
        "draft": str(args.draft) if args.draft else None,
        "draft_size": Path(args.draft).stat().st_size if args.draft and Path(args.draft).exists() else 0,
        "derived_drafts": {q: {"path": str(p), "size": p.stat().st_size} for q, p in derived.items()},
        "build_commit": caps.commit,
        "compiler": caps.compiler,
        "llama_prefix": str(prefix.resolve()),
        "arms": [a.name for a in arms],
        "arm_defs": [a.to_dict() for a in arms],
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine_info(),
        "tasks": [t.to_dict() for t in tasks],
    }
    try:
        old = store.load_plan()
        if old and not args.fresh:
            plan["started_at"] = old.get("started_at", plan["started_at"])
            known = {d["name"] for d in plan["arm_defs"]}
            plan["arm_defs"] += [d for d in old.get("arm_defs", []) if d["name"] not in known]
        store.init_plan(plan, fresh=args.fresh)
    except StoreError as exc:
        _err(str(exc))
        return 2
    progress.note(
        f"bench: {len(arms)} arms × {len(tasks)} tasks × {args.reps} reps, max {args.max_tokens} "
        f"tokens; results in {work}"
    )

    if any(a.kind == "speculative-cli" for a in arms):
        prompts = store.load_json("prompts.json")
        if not prompts or any(t.id not in prompts for t in tasks):
            try:
                prompts = _render(cfg, store)
            except (ServerStartError, CliError) as exc:
                _err(f"cannot render prompts for llama-speculative: {exc}")
                return 1
            store.save_json("prompts.json", prompts)
        cfg.prompts = prompts

    if not args.no_ceiling and store.load_json("ceiling.json") is None:
        bench_bin = prefix / "bin" / "llama-bench"
        if bench_bin.exists():
            nums = {
                ceil.Numerics.of_profile(a.profile, a.env).name: ceil.Numerics.of_profile(a.profile, a.env)
                for a in arms
                if a.kind == "server"
            }
            drafts = {"draft": Path(args.draft)} if needs_draft and args.draft else {}
            drafts.update(derived)
            if args.max_busy is not None:
                wait_for_quiet(cfg, progress)
            try:
                data = ceil.measure(
                    bench_bin,
                    Path(args.target),
                    list(nums.values()),
                    drafts,
                    args.ceiling_depth,
                    args.ceiling_reps,
                    args.threads,
                    progress.note,
                    ks=range(1, max(2, args.ceiling_k_max) + 1),
                )
                store.save_json("ceiling.json", data)
            except ceil.CeilingError as exc:
                _err(f"hardware ceiling not measured: {exc}")
        else:
            _err(f"{bench_bin} missing: hardware ceiling not measured")

    signal.signal(signal.SIGTERM, _sigterm)
    try:
        run_bench(cfg, arms, store, {"server": run_server_arm, "speculative-cli": run_cli_arm}, progress)
    except BenchError as exc:
        _err(str(exc))
        _err(f"finished arm-repetitions are kept in {work}; re-run the same command to resume")
        return 1
    except KeyboardInterrupt:
        _err(f"interrupted; results so far kept in {work}; re-run the same command to resume")
        return 130
    return _report(args, store)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _render(cfg: BenchConfig, store: ResultStore) -> dict[str, str]:
    profile = ServerProfile.from_dict(
        {"model": str(cfg.target), "ctx_size": cfg.ctx_size, "spec_type": "none", "threads": cfg.threads}
    )
    with ServerProcess(cfg.server_binary, profile, cfg.caps, store.root / "logs" / "render-prompts.log") as srv:
        assert srv.client is not None
        return render_prompts(srv.client, cfg.tasks)
