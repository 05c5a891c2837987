"""The ``specops`` command. Each subcommand lives in its own module under :mod:`specops.commands`.

A command module defines ``NAME``, ``HELP`` and ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from specops import __version__, commands
from specops.oneline import CommandParser

# commands whose usage errors are one line (the exporter runs under systemd, where a usage dump buries the error;
# a build's bad input is one line too)
ONE_LINE_ERRORS = frozenset({"exporter", "build"})

DESCRIPTION = ("specops: build, deploy, verify, benchmark and watch llama.cpp speculative decoding. "
               "Run `specops COMMAND --help` for each command.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specops", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"specops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if not hasattr(module, "run"):
            continue
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        cmd.one_line_errors = module.NAME in ONE_LINE_ERRORS
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser | None:
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]  # type: ignore[no-any-return]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse reports them from the top parser, with its usage: let the command's parser say it
        command = _subparser(parser, getattr(args, "command", None))
        (command or parser).error(f"unrecognized arguments: {' '.join(extra)}")
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
