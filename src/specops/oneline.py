"""An ArgumentParser whose usage errors are one line on stderr (exit status 2), not usage + error.

The exporter runs under systemd: a usage dump in the journal hides the one line that says what is wrong.
Standard library only (the exporter's host has no other specops dependency).
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """``PROG: error: MESSAGE (see PROG --help)`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())  # argparse's messages may wrap
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: one-line usage errors when ``one_line_errors`` is set, argparse's otherwise."""

    one_line_errors = False

    def error(self, message: str) -> NoReturn:
        if self.one_line_errors:
            OneLineParser.error(self, message)  # type: ignore[arg-type]
        super().error(message)
