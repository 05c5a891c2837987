"""``specops check-pair TARGET DRAFT``: can llama.cpp use DRAFT to speculate for TARGET?

Exit status: 0 compatible, 1 incompatible, 2 bad input (missing file, not a GGUF, damaged).
"""

from __future__ import annotations

import argparse
import json
import sys

from specops.ggufmeta import GGUFError
from specops.pair import PairInputError, check_pair, render

NAME = "check-pair"
HELP = "check a draft/target GGUF pair against llama.cpp's speculative vocab rules (headers only)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="target model GGUF")
    p.add_argument("draft", help="draft model GGUF")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")


def run(args: argparse.Namespace) -> int:
    try:
        report = check_pair(args.target, args.draft)
    except (GGUFError, PairInputError) as exc:
        if args.json:
            print(json.dumps({"compatible": None, "error": str(exc)}))
        print(f"specops check-pair: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**report.as_dict(), "message": render(report)}, ensure_ascii=False))
    else:
        print(render(report))
    return 0 if report.compatible else 1
