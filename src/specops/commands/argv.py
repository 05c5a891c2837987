"""``specops argv``: render llama-server's command line from a profile and a binary's capabilities."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from specops.argv import FlagError, build_argv, shell_line, systemd_line
from specops.capabilities import Capabilities, probe
from specops.profile import ProfileError, ServerProfile

NAME = "argv"
HELP = "render llama-server arguments for a profile, checked against the binary's capabilities"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", type=Path, required=True, help="YAML/JSON profile (see specops.profile)")
    caps = p.add_mutually_exclusive_group(required=True)
    caps.add_argument("--capabilities", type=Path, help="capabilities JSON written by the build role")
    caps.add_argument("--binary", help="probe this llama-server binary directly")
    p.add_argument("--format", choices=["json", "shell", "systemd"], default="shell")


def run(args: argparse.Namespace) -> int:
    caps = Capabilities.load(args.capabilities) if args.capabilities else probe(args.binary)
    binary = args.binary or "llama-server"
    try:
        profile = ServerProfile.from_dict(yaml.safe_load(args.profile.read_text()) or {})
        argv = build_argv(profile, caps, binary=binary)
    except (ProfileError, FlagError) as exc:
        print(f"specops argv: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(argv))
    elif args.format == "systemd":
        print(systemd_line(argv))
    else:
        print(shell_line(argv))
    return 0
