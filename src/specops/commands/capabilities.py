"""``specops capabilities``: probe a llama-server binary (or parse saved --help text)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specops.capabilities import parse_help, parse_version, probe

NAME = "capabilities"
HELP = "print what a llama-server binary supports (parsed from its --help/--version) as JSON"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--binary", help="path to llama-server")
    src.add_argument("--help-file", type=Path, help="saved `llama-server --help` output")
    p.add_argument("--version-file", type=Path, help="saved `llama-server --version` output")
    p.add_argument("-o", "--output", type=Path, help="write JSON here instead of stdout")


def run(args: argparse.Namespace) -> int:
    if args.binary:
        caps = probe(args.binary)
    else:
        caps = parse_help(args.help_file.read_text())
        if args.version_file:
            parse_version(args.version_file.read_text(), caps)
    text = caps.to_json() + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0
