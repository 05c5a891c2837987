"""The ``specops`` command. Each subcommand lives in its own module under :mod:`specops.commands`.

A command module defines ``NAME``, ``HELP`` and ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from specops import __version__, commands

DESCRIPTION = ("specops: build, deploy, verify, benchmark and watch llama.cpp speculative decoding. "
               "Run `specops COMMAND --help` for each command.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specops", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"specops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if not hasattr(module, "run"):
            continue
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `specops ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
