"""``specops check-pair TARGET DRAFT``: can llama.cpp use DRAFT to speculate for TARGET?

Two directories are Hugging Face model directories (EXL2/EXL3 for TabbyAPI): the same rules, read from
their tokenizer.json / tokenizer_config.json / config.json (:mod:`specops.tabbyapi.hfvocab`).

Exit status: 0 compatible, 1 incompatible, 2 bad input (missing file, not a GGUF, damaged).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specops.ggufmeta import GGUFError
from specops.pair import PairInputError, check_pair, render
from specops.tabbyapi.hfvocab import check_hf_pair, render_hf

NAME = "check-pair"
HELP = "check a draft/target GGUF pair against llama.cpp's speculative vocab rules (headers only)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="target model GGUF (or a Hugging Face model directory, for TabbyAPI)")
    p.add_argument("draft", help="draft model GGUF (or a Hugging Face model directory)")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")


def run(args: argparse.Namespace) -> int:
    hf = Path(args.target).is_dir() or Path(args.draft).is_dir()
    try:
        report = check_hf_pair(args.target, args.draft) if hf else check_pair(args.target, args.draft)
    except (GGUFError, PairInputError) as exc:
        if args.json:
            print(json.dumps({"compatible": None, "error": str(exc)}))
        print(f"specops check-pair: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**report.as_dict(), "message": (render_hf if hf else render)(report)}, ensure_ascii=False))
    else:
        print((render_hf if hf else render)(report))
    return 0 if report.compatible else 1
