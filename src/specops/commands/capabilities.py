"""``specops capabilities``: probe a llama-server binary (or parse saved --help text); ``capabilities diff OLD NEW``:
what an upgrade from one build to another changes, and whether a service profile still renders for the new one."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from specops.capabilities import parse_help, parse_version, probe
from specops.capdiff import diff_help, profile_renders, render_text
from specops.knobs import HELP_FLAG
from specops.profile import ProfileError, ServerProfile

NAME = "capabilities"
HELP = ("print what a llama-server binary supports (parsed from its --help/--version) as JSON; "
        "`capabilities diff OLD NEW` compares two builds")
EXIT_PROFILE_BREAKS = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--binary", help="path to llama-server")
    src.add_argument("--help-file", type=Path, help="saved `llama-server --help` output")
    p.add_argument("--version-file", type=Path, help="saved `llama-server --version` output")
    p.add_argument("-o", "--output", type=Path, help="write JSON here instead of stdout")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    d = sub.add_parser("diff", help="flags removed, renamed, added, defaults changed, speculative types, between "
                                    "two builds; with --profile, whether it still renders for NEW",
                       description="Compare two llama-server builds (each a binary, run with --help, or a saved "
                                   "--help text). Exit 0; 3 when --profile cannot be rendered for NEW.")
    d.add_argument("old", help="the build now deployed: a llama-server binary or a saved --help file")
    d.add_argument("new", help="the build to upgrade to: a llama-server binary or a saved --help file")
    d.add_argument("--profile", type=Path,
                   help="a service profile (YAML or JSON, keys of specops.profile.ServerProfile) to render for NEW")
    d.add_argument("--json", action="store_true", help="print JSON instead of text")


def _help_text(source: str) -> str:
    """--help text of a binary (an executable file) or a saved --help file."""
    path = Path(source)
    if not path.exists():
        raise SystemExit(f"specops capabilities diff: {source}: no such file (a llama-server binary or its --help)")
    if path.is_file() and os.access(path, os.X_OK) and path.suffix != ".txt":
        run = subprocess.run([str(path), HELP_FLAG], capture_output=True, text=True, timeout=60, check=False)
        return run.stdout + run.stderr
    return path.read_text(errors="replace")


def _diff(args: argparse.Namespace) -> int:
    old_help, new_help = _help_text(args.old), _help_text(args.new)
    if not parse_help(new_help).flags:
        raise SystemExit(f"specops capabilities diff: {args.new}: no llama-server options found in its --help")
    d = diff_help(old_help, new_help)
    rendered: tuple[bool, str] | None = None
    if args.profile:
        try:
            profile = ServerProfile.from_dict(yaml.safe_load(args.profile.read_text()) or {})
        except (OSError, yaml.YAMLError, ProfileError, TypeError) as exc:
            raise SystemExit(f"specops capabilities diff: --profile {args.profile}: {exc}") from None
        rendered = profile_renders(profile, parse_help(new_help))
    if args.json:
        data = d.to_dict()
        if rendered is not None:
            data["profile"] = {"renders": rendered[0], ("argv" if rendered[0] else "reason"): rendered[1]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(d, args.old, args.new))
        if rendered is not None:
            sys.stdout.write(f"profile {args.profile}: renders for NEW: {rendered[1]}\n" if rendered[0] else
                             f"profile {args.profile}: does NOT render for NEW: {rendered[1]}\n")
    return 0 if rendered is None or rendered[0] else EXIT_PROFILE_BREAKS


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "diff":
        return _diff(args)
    if not args.binary and not args.help_file:
        raise SystemExit("specops capabilities: give --binary or --help-file (or: capabilities diff OLD NEW)")
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
