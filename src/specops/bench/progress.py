"""The bench's live progress on stderr: a line per block (each server's rate and its ratio to plain decoding) and,
every few blocks, where every arm stands on every workload.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import TextIO

from specops.bench.arms import AA, BASELINE
from specops.bench.design import Block, Design
from specops.bench.verdict import rel_half_width


def fmt_s(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


class Progress:
    """Live progress on stderr: a line per block, and the state of every arm every few blocks."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False, every: int = 4) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.every = every
        self.t0 = time.monotonic()

    def note(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def block(self, design: Design, block: Block, tps: Mapping[str, float | None], elapsed: float,
              budget: float | None, tasks_total: int) -> None:
        base = tps.get(BASELINE) or 0.0
        parts = []
        for arm in block.arms:
            v = tps.get(arm)
            if v is None:
                parts.append(f"{arm} –")
            elif arm == BASELINE:
                parts.append(f"{arm} {v:.1f}")
            else:
                parts.append(f"{arm} {v:.1f} ({v / base:.2f})" if base else f"{arm} {v:.1f}")
        left = f", {fmt_s(budget - elapsed)} of budget left" if budget else ""
        self.note(f"[block {block.index + 1}, {fmt_s(elapsed)}{left}] {block.workload}/{block.task}: "
                  + ", ".join(parts) + " tok/s")
        if (block.index + 1) % self.every == 0:
            self.state(design, tasks_total)

    def state(self, design: Design, tasks_total: int) -> None:
        alive = design.running()
        self.note(f"  arms running: {len(alive)}/{len(design.arms)} ({', '.join(alive) or 'none'}); "
                  f"blocks done: {design.blocks} of at most {tasks_total * design.reps}")
        for wl in design.workloads:
            aa = design.interval(AA, wl)
            cells = [f"A/A {aa.fmt()}" if aa else "A/A –"]
            for arm in design.arms:
                iv = design.interval(arm, wl)
                st = design.status[arm][wl].stopped
                if iv is None:
                    continue
                hw = rel_half_width(iv)
                cells.append(f"{arm} {iv.fmt()}" + (f" ±{hw:.0%}" if math.isfinite(hw) else "")
                             + (f" [{st}]" if st else ""))
            self.note(f"  {wl}: " + "; ".join(cells))
