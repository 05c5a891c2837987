"""``specops knobs``: the llama-server settings table (src/specops/knobs.py), as JSON or as the role README's
Markdown table; ``--update [ROLE]`` rewrites the role's copies of it (defaults, argument specs, README table:
specops.knobgen) and of the tune settings table (src/specops/tune/settings.py: the tune blocks of the defaults and
argument specs), ``--check`` says which are stale and changes nothing."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from specops.knobgen import MD_BEGIN as BEGIN
from specops.knobgen import MD_END as END
from specops.knobgen import replace_section as _replace
from specops.knobgen import update
from specops.knobs import KNOBS, markdown_table

NAME = "knobs"
HELP = "print the llama-server settings table (names, defaults, flag spellings per llama.cpp era)"
ROLE = Path("roles/llama_server")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", action="store_true", help="the role README's settings table (default: JSON)")
    p.add_argument("--update", type=Path, nargs="?", const=ROLE, metavar="ROLE",
                   help="rewrite the role's copies of the table (defaults/main.yml, meta/argument_specs.yml, "
                        "README.md, between their knobs markers) and of the tune settings table (the first two of "
                        "roles/llama_server_tune beside it, between their tune settings markers); default "
                        f"{ROLE}; a README path names its role")
    p.add_argument("--check", action="store_true", help="with --update: list the stale copies, exit 1, write nothing")


def replace_section(text: str, table: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the part between the markers replaced by ``table`` (`specops role-settings` passes its own
    markers)."""
    return _replace(text, table, begin, end)


def run(args: argparse.Namespace) -> int:
    if args.update:
        role = args.update.parent if args.update.is_file() else args.update
        try:
            changed = update(role, write=not args.check)
        except (OSError, ValueError) as exc:
            print(f"specops knobs: {role}: {exc}", file=sys.stderr)
            return 2
        for path in changed:
            print(f"{'stale' if args.check else 'rewrote'}: {path}")
        return 1 if args.check and changed else 0
    if args.markdown:
        sys.stdout.write(markdown_table())
    else:
        print(json.dumps([asdict(k) for k in KNOBS], indent=2, default=list))
    return 0
