"""``specops saturate``: the saturation soak — N clients against ``--parallel N``, speculative vs plain."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from specops.capabilities import Capabilities
from specops.commands.soak import duration
from specops.knobs import knob
from specops.paths import llama_prefix
from specops.profile import ProfileError, ServerProfile
from specops.server import ServerProcess
from specops.soak.config import FaultSpec, SoakConfigError
from specops.soak.runner import new_run_id
from specops.soak.saturation import SPEC, SaturationPlan, SaturationRunner

NAME = "saturate"
HELP = (f"saturation soak: N clients against llama-server {knob('parallel').flag} N (N = 1, 2, 4), speculative "
        "and plain alternating under the same load, faults, per-slot figures; writes reports/saturation-*.md")


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma list of slot counts, e.g. 1,2,4") from None
    if not levels:
        raise argparse.ArgumentTypeError("at least one level")
    return levels


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("servers (both arms: same build, target, threads, context per slot)")
    m.add_argument("--llama-prefix", type=Path, help="llama.cpp install with bin/llama-server and capabilities.json "
                   "(default: $SPECOPS_LLAMA_PREFIX, else /opt/llama.cpp/current)")
    m.add_argument("--target", type=Path, required=True, help="target GGUF")
    m.add_argument("--draft", type=Path, help="draft GGUF (the speculative arm); without it --spec-type must be an "
                   "n-gram type")
    m.add_argument("--spec-type", default="auto", help="speculative arm's type (default: draft-simple with --draft)")
    m.add_argument("--draft-n-max", type=int, help=f"{knob('draft_n_max').flag} of the speculative arm")
    m.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="default %(default)s")
    m.add_argument("--ctx-per-slot", type=int, default=2048, help="context per slot; -c = N × this (default "
                   "%(default)s)")
    m.add_argument("--cache-ram-mib", type=int, default=1024, help="prompt cache bound (default %(default)s)")
    m.add_argument("--extra-arg", action="append", default=[], metavar="ARG",
                   help="extra llama-server argument for both arms (repeatable, e.g. "
                        f"--extra-arg={knob('flash_attn').short()} --extra-arg=on)")
    lo = p.add_argument_group("load")
    lo.add_argument("--levels", type=_levels, default=(1, 2, 4), help="comma list of N (default 1,2,4)")
    lo.add_argument("--duration", type=duration, default=600.0,
                    help="load per level, both arms together: 90s, 10m, ... (default 600 s; total ≈ levels × this)")
    lo.add_argument("--phase", type=duration, default=60.0, help="seconds per arm and phase (default %(default)s)")
    lo.add_argument("--max-tokens", type=int, default=128, help="default %(default)s")
    lo.add_argument("--timeout", type=float, default=300.0, help="per attempt, seconds (default %(default)s)")
    lo.add_argument("--tasks", action="append", default=[], metavar="FILE", help="task JSONL (default: standard set)")
    lo.add_argument("--workload", action="append", default=[], help="only these workloads (repeatable)")
    lo.add_argument("--seed", type=int, default=42)
    fa = p.add_argument_group("faults")
    fa.add_argument("--faults", default="kill9,stop:10", help="comma list cycled over faulted blocks: kill9, "
                    "stop[:SECONDS] ('' for none; default %(default)s)")
    fa.add_argument("--fault-every", type=int, default=2, help="every k-th block (default %(default)s)")
    fa.add_argument("--fault-at", type=float, default=0.3, help="fraction into the phase (default %(default)s)")
    fa.add_argument("--recovery-timeout", type=duration, default=300.0, help="default %(default)ss")
    out = p.add_argument_group("output")
    out.add_argument("--report-dir", default="reports", help="default %(default)s")
    out.add_argument("--run-id", help="report name saturation-RUN_ID.* (default: UTC timestamp)")
    out.add_argument("--log-dir", type=Path, help="llama-server logs (default: REPORT_DIR/saturation-RUN_ID-logs)")
    out.add_argument("--log-level", default=os.environ.get("SPECOPS_LOG_LEVEL", "INFO"))


def _cache_type(extra: list[str], flags: tuple[str, ...]) -> str:
    for i, arg in enumerate(extra):
        name, eq, value = arg.partition("=")
        if name in flags:
            return value if eq else (extra[i + 1] if i + 1 < len(extra) else "f16")
    return "f16"


def kv_per_slot(target: Path, draft: Path | None, ctx_per_slot: int,
                extra: list[str]) -> Callable[[str], int | None]:
    """Bytes of KV cache one slot holds, per arm: the target's (and the draft's in the speculative arm) for
    ``ctx_per_slot`` cells at the cache types of ``extra`` (f16 unless -ctk/-ctv say otherwise)."""
    from specops.fit import ModelShape, pad
    from specops.ggufmeta import GGUFError, read

    tk = _cache_type(extra, knob("cache_type_k").flags)
    tv = _cache_type(extra, knob("cache_type_v").flags)
    try:
        tshape = ModelShape.of(read(target, check_data=False))
        dshape = ModelShape.of(read(draft, check_data=False)) if draft else None
        plain = tshape.kv_bytes(pad(ctx_per_slot), tk, tv)
        spec = plain + (dshape.kv_bytes(pad(ctx_per_slot), tk, tv) if dshape else 0)
    except (GGUFError, OSError, ValueError):
        return lambda arm: None
    return lambda arm: spec if arm == SPEC else plain


def _err(msg: str) -> int:
    print(f"specops saturate: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from specops.soak import saturation_report

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    prefix = llama_prefix(args.llama_prefix)
    binary, caps_file = prefix / "bin" / "llama-server", prefix / "capabilities.json"
    if not binary.exists() or not caps_file.exists():
        return _err(f"no llama.cpp build at {prefix} (need bin/llama-server and capabilities.json)")
    for label, path in (("target", args.target), ("draft", args.draft)):
        if path is not None and not path.exists():
            return _err(f"{label} model {path} not found")
    caps = Capabilities.load(caps_file)
    try:
        faults = tuple(FaultSpec.parse(f) for f in args.faults.split(",") if f.strip())
        plan = SaturationPlan(levels=args.levels, duration=args.duration, phase=args.phase, faults=faults,
                              fault_every=args.fault_every, fault_at=args.fault_at, max_tokens=args.max_tokens,
                              request_timeout=args.timeout, recovery_timeout=args.recovery_timeout, seed=args.seed,
                              task_files=tuple(args.tasks), workloads=tuple(args.workload))
        base = {"model": str(args.target), "threads": args.threads, "cache_ram_mib": args.cache_ram_mib,
                "extra_args": list(args.extra_arg)}
        spec = ServerProfile.from_dict({**base, "draft_model": str(args.draft) if args.draft else None,
                                        "spec_type": args.spec_type, "draft_n_max": args.draft_n_max})
        if not spec.speculative:
            return _err("the speculative arm does not speculate: give --draft or an n-gram --spec-type")
        plain = ServerProfile.from_dict({**base, "spec_type": "none"})
    except (SoakConfigError, ProfileError, ValueError) as exc:
        return _err(str(exc))
    run_id = args.run_id or new_run_id()
    log_dir = args.log_dir or Path(args.report_dir) / f"saturation-{run_id}-logs"
    ports: dict[tuple[str, int], int] = {}

    def make(arm: str, level: int, generation: int) -> ServerProcess:
        profile = ServerProfile.from_dict({**(spec if arm == SPEC else plain).to_dict(), "parallel": level,
                                           "ctx_size": level * args.ctx_per_slot})
        server = ServerProcess(binary, profile, caps, log_path=log_dir / f"n{level}-{arm}-{generation}.log",
                               port=ports.get((arm, level)))
        ports[(arm, level)] = server.profile.port  # a restarted server comes back on the same port
        return server

    spec_args = (f"{knob('draft_model').short()} {args.draft.name} " if args.draft else "") + (
        f"{knob('spec_type').flag} {spec.effective_spec_type}") + (
        f" {knob('draft_n_max').flag} {args.draft_n_max}" if args.draft_n_max else "")
    setup = {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "build": str(prefix.resolve()),
             "commit": caps.commit, "target": args.target.name, "draft": args.draft.name if args.draft else None,
             "spec_args": spec_args,
             "threads": args.threads, "ctx_per_slot": args.ctx_per_slot, "extra_args": list(args.extra_arg)}
    runner = SaturationRunner(plan, make, run_id=run_id, setup=setup,
                              kv_per_slot=kv_per_slot(args.target, args.draft, args.ctx_per_slot, args.extra_arg))
    signal.signal(signal.SIGTERM, lambda *_: runner.request_stop())
    try:
        result = runner.run()
    except KeyboardInterrupt:
        return 130
    paths = saturation_report.write(result, args.report_dir)
    print(f"saturation {result.run_id}: {'PASS' if result.ok else 'FAIL'}")
    for lv in result.levels:
        s, p = lv["arms"]["speculative"], lv["arms"]["plain"]
        print(f"  N={lv['level']}: speculative {s['tokens_per_s'] or 0:.1f} tok/s, plain {p['tokens_per_s'] or 0:.1f} "
              f"tok/s; lost {s['lost'] + p['lost']}, failed {s['failed'] + p['failed']}")
    for problem in result.problems:
        print(f"  FAIL {problem}")
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    return 0 if result.ok else 1
