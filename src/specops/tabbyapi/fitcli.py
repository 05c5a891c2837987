"""``specops fit --engine tabbyapi TARGET_DIR [DRAFT_DIR] --gpu 32GiB --gpu 24GiB ...``: the options and the run.

Exit status as ``specops fit``: 0 fits, 1 does not fit, 2 bad input (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse

from specops.fit import FitError, deployed, print_error, print_report
from specops.knobs import knob
from specops.tabbyapi.fit import Shape, TabbyFitParams, estimate, parse_size, render


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("TabbyAPI (--engine tabbyapi: TARGET and DRAFT are EXL2/EXL3 model directories; "
                             "-c is max_seq_len)")
    g.add_argument("--engine", choices=("llama.cpp", "tabbyapi"), default="llama.cpp",
                   help="llama.cpp (GGUF files, default) or tabbyapi (ExLlamaV2/V3 model directories)")
    g.add_argument("--gpu", action="append", default=[], metavar="SIZE",
                   help="one per GPU, in CUDA order: 32GiB, 24GB, 24576MiB (bare numbers are GiB)")
    g.add_argument("--cache-mode", default="FP16", help="target cache: FP16, Q8, Q6, Q4 (exllamav3 also k,v)")
    g.add_argument("--draft-cache-mode", default="FP16", help="draft cache: FP16, Q8, Q6, Q4")
    g.add_argument("--cache-size", type=int, help="TabbyAPI cache_size (default: max_seq_len)")
    g.add_argument("--gpu-split", type=_floats, default=[], metavar="GIB,GIB",
                   help="TabbyAPI gpu_split for the target, GiB per GPU (default: autosplit)")
    g.add_argument("--draft-gpu-split", type=_floats, default=[], metavar="GIB,GIB")
    g.add_argument("--autosplit-reserve", type=_floats, default=[96.0], metavar="MIB,MIB",
                   help="MiB kept free per GPU by autosplit (TabbyAPI default 96 on GPU 0)")
    g.add_argument("--bpw", type=float, help="target bits per weight (default: its quantization_config)")
    g.add_argument("--draft-bpw", type=float, help="draft bits per weight")
    g.add_argument("--chunk-size", type=int, default=2048, help="TabbyAPI chunk_size (default 2048)")
    g.add_argument("--exl-backend", choices=("exllamav2", "exllamav3"), default="exllamav2")


def run(args: argparse.Namespace) -> int:
    try:
        ctx = int(args.ctx_size if args.ctx_size is not None else deployed("ctx_size"))
        if ctx < 1:
            raise FitError(f"{knob('ctx_size').flag} (max_seq_len) must be ≥ 1 for TabbyAPI")
        params = TabbyFitParams(
            max_seq_len=ctx, cache_size=args.cache_size, cache_mode=args.cache_mode,
            draft_cache_mode=args.draft_cache_mode, bpw=args.bpw, draft_bpw=args.draft_bpw,
            gpu_split=args.gpu_split, draft_gpu_split=args.draft_gpu_split,
            autosplit_reserve_mib=args.autosplit_reserve, chunk_size=args.chunk_size, backend=args.exl_backend,
            margin=args.margin)
        target = Shape.of_dir(args.target)
        draft = Shape.of_dir(args.draft) if args.draft else None
        report = estimate(target, draft, [parse_size(s) for s in args.gpu], params)
    except FitError as exc:
        return print_error(exc, args.json)
    return print_report(report, render(report), args.json)
