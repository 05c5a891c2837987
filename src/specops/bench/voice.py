"""What a bench run says, and how it ends early: its lines on stdout, its one-line errors on stderr, and
:class:`Stop` (the exit status and the lines that say why)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass


def stderr_line(text: str) -> None:
    """One of the bench's one-line errors, as ``specops bench`` prints it."""
    print(f"specops bench: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Say:
    """Where the bench's own lines go: what it wrote and recommends (``out``, stdout) and its one-line errors
    (``err``, ``specops bench: ...`` on stderr). The command's by default; ``specops tune`` keeps them too."""

    out: Callable[[str], None] = print
    err: Callable[[str], None] = stderr_line


class Stop(Exception):
    """A run ends early with exit status ``code`` (1: the run failed, 2: bad input, 130: SIGINT or SIGTERM);
    ``lines``: its one-line errors, said in order."""

    def __init__(self, code: int, *lines: str) -> None:
        super().__init__(code, *lines)
        self.code = code
        self.lines = lines
