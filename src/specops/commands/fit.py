"""``specops fit TARGET [DRAFT]``: do the models, their KV caches and compute buffers fit in memory?

Exit status: 0 fits, 1 does not fit (with the margin), 2 bad input (missing/invalid GGUF, bad option,
GPU memory that cannot be measured).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specops.fit import CACHE_TYPES, DEFAULT_MARGIN, FitError, FitParams, estimate, measure_memory, render
from specops.ggufmeta import GGUFError
from specops.tabbyapi import fitcli

NAME = "fit"
HELP = "estimate memory for target + draft (weights, KV, compute) and check it against RAM or GPU memory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, help="target model GGUF")
    p.add_argument("draft", type=Path, nargs="?", help="draft model GGUF (optional)")
    p.add_argument("-c", "--ctx-size", type=int, default=4096,
                   help="llama-server -c: total context over all slots (0 = the model's); default 4096")
    p.add_argument("-np", "--parallel", type=int, default=1, help="llama-server -np slots (default 1)")
    p.add_argument("--kv-unified", action="store_true", help="llama-server --kv-unified")
    p.add_argument("-ctk", "--cache-type-k", default="f16", choices=CACHE_TYPES)
    p.add_argument("-ctv", "--cache-type-v", default="f16", choices=CACHE_TYPES)
    p.add_argument("-ctkd", "--draft-cache-type-k", default="f16", choices=CACHE_TYPES)
    p.add_argument("-ctvd", "--draft-cache-type-v", default="f16", choices=CACHE_TYPES)
    p.add_argument("-ub", "--ubatch-size", type=int, default=512, help="llama-server -ub (default 512)")
    p.add_argument("-fa", "--flash-attn", choices=("on", "off", "auto"), default="auto",
                   help="auto counts as on (llama.cpp enables it where supported)")
    p.add_argument("--spec-draft-n-max", type=int, default=3, help="draft tokens per step (output rows)")
    p.add_argument("--cache-ram", type=int, default=0, metavar="MIB",
                   help="llama-server --cache-ram (its default is 8192): host RAM its prompt cache may fill; "
                        "counted against host RAM (default 0 = not counted)")
    p.add_argument("--backend", default="cpu",
                   help="cpu (host RAM), cuda (nvidia-smi), rocm/hip (rocm-smi), vulkan/metal/... (host RAM "
                        "unless --memory-mib); default cpu")
    p.add_argument("--margin", default=DEFAULT_MARGIN,
                   help="headroom required: the largest of a comma list of N%% / N MiB|GiB "
                        f"(default {DEFAULT_MARGIN})")
    p.add_argument("--memory-basis", choices=("available", "total"), default="available",
                   help="host RAM: what is available now (default) or the total")
    p.add_argument("--memory-mib", type=float, help="check against this much memory instead of measuring "
                   "(e.g. the deploy host's, from Ansible facts)")
    p.add_argument("--nvidia-smi-output", help="nvidia-smi CSV (total, used) captured on the deploy host")
    p.add_argument("--devices-output", type=Path,
                   help="`llama-server --list-devices` output captured on the deploy host: GPU memory of the "
                        "--backend's devices (works for vulkan, sycl, metal too)")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    fitcli.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    if args.engine == "tabbyapi":
        return fitcli.run(args)
    params = FitParams(
        ctx_size=args.ctx_size, parallel=args.parallel, kv_unified=args.kv_unified,
        cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
        draft_cache_type_k=args.draft_cache_type_k, draft_cache_type_v=args.draft_cache_type_v,
        ubatch=args.ubatch_size, flash_attn=args.flash_attn != "off", draft_n_max=args.spec_draft_n_max,
        margin=args.margin, prompt_cache_mib=args.cache_ram,
    )
    try:
        memory = measure_memory(args.backend, args.memory_basis, memory_mib=args.memory_mib,
                                nvidia_smi_output=args.nvidia_smi_output,
                                list_devices_output=args.devices_output.read_text() if args.devices_output else None)
        report = estimate(args.target, args.draft, params, memory)
    except (FitError, GGUFError) as exc:
        if args.json:
            print(json.dumps({"fits": None, "error": str(exc)}))
        print(f"specops fit: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**report.as_dict(), "message": render(report)}, ensure_ascii=False))
    else:
        print(render(report))
    return 0 if report.fits else 1
