"""The tune's progress as one line in a file (``specops tune --progress-file PATH``), for whoever watches a deploy:
the deploy runs the tune as one Ansible task for its whole budget (minutes), and ``scripts/demo`` prints this line
while it runs, as it prints the compile's (roles/llama_cpp's ``build-progress.txt``).

The line is ``tune: <phase> — <detail> — <m:ss> left``, rewritten whole (a temporary file, then ``os.replace``) so a
reader never sees half of one; the phases are ceiling, probes, predictions, measure and choose, and the last line is
``tune: done — <detail>`` (or ``tune: stopped — <why>`` for a tune that refused or was stopped).

Each step also looks at the tune's leash (:mod:`specops.tune.leash`): a tune whose deploy is gone stops there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from specops.bench.design import Block, Design
from specops.bench.runner import Progress
from specops.paths import write_whole
from specops.tune.leash import Leash


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress-file", type=Path, metavar="PATH",
                   help="keep one line of progress here while the tune runs (phase, detail, time left), rewritten "
                        "whole at each step: the deploy's watcher prints it")


def clock(seconds: float) -> str:
    """``m:ss``; a budget already overrun reads 0:00."""
    s = max(0, round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def line(phase: str, detail: str, left_s: float) -> str:
    return f"tune: {phase} — {detail} — {clock(left_s)} left"


class ProgressFile:
    """The progress line at ``path`` (no path: nothing is written). A file that cannot be written is said once on
    stderr and not tried again: the tune goes on without it. Every update first looks at ``leash`` (raises
    :class:`specops.tune.leash.Stopped` when the deploy is gone)."""

    def __init__(self, path: Path | str | None = None, leash: Leash | None = None) -> None:
        self.path = Path(path) if path else None
        self.leash = leash or Leash()

    def update(self, phase: str, detail: str, left_s: float) -> None:
        self.leash.check()
        self.write(line(phase, detail, left_s))

    def done(self, detail: str) -> None:
        self.write(f"tune: done — {detail}")

    def stopped(self, why: str) -> None:
        self.write(f"tune: stopped — {why.splitlines()[0] if why else 'no reason given'}")

    def write(self, text: str) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(self.path, text + "\n")
        except OSError as exc:
            print(f"specops tune: progress file {self.path}: {exc.strerror or exc}; not written again",
                  file=sys.stderr, flush=True)
            self.path = None


def figures(design: Design) -> str:
    """Every candidate's speed-up over plain decoding so far (the whole mix; – before its first figure)."""
    parts = []
    for arm in design.arms:
        iv = design.mix_interval(arm)
        parts.append(f"{arm} {iv.fmt() if iv else '–'}")
    return ", ".join(parts) or "no candidate"


class MeasureProgress(Progress):
    """The side-by-side measurement's progress: the bench's own lines on stderr as ever, and after every block the
    tune's progress line with the block's number and every candidate's figures so far."""

    def __init__(self, meter: ProgressFile, left: Callable[[], float], stream: TextIO | None = None,
                 quiet: bool = False) -> None:
        super().__init__(stream, quiet)
        self.meter, self.left = meter, left

    def block(self, design: Design, block: Block, tps: Mapping[str, float | None], elapsed: float,
              budget: float | None, tasks_total: int) -> None:
        super().block(design, block, tps, elapsed, budget, tasks_total)
        plan = f" ({design.allocation()})" if design.shares is not None else ""
        self.meter.update("measure", f"block {block.index + 1}{plan}: {figures(design)}", self.left())
