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


def _module_names(only: str | None = None) -> list[str]:
    """The command modules, or just the one for command ``only`` (``check-pair`` lives in ``check_pair``)."""
    names = sorted(info.name for info in pkgutil.iter_modules(commands.__path__))
    if only is not None and only.replace("-", "_") in names:
        return [only.replace("-", "_")]
    return names


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with command ``only`` alone when there is one by that name: a command
    run imports its own module only (the deploy runs `specops fit`, `check-pair` and `fetch-model` on every run;
    importing all of them cost ~0.25 s each time on the 2-core lab machine)."""
    parser = argparse.ArgumentParser(prog="specops", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"specops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name in _module_names(only):
        module = importlib.import_module(f"{commands.__name__}.{name}")
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


def _command_word(argv: list[str]) -> str | None:
    """The command named on the line (its first word), when it comes before any option."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_command_word(sys.argv[1:] if argv is None else argv))
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
