"""What a tune carries from step to step (:class:`Setup`: the build, the candidates, the clock, what stays open),
and :class:`TuneError`, what stops it before a choice can be made (one line, exit 2, nothing changed)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.runner import BenchConfig, Progress
from specops.bench.store import ResultStore
from specops.bench.tasks import Task
from specops.capabilities import Capabilities
from specops.tune import progress

REPORT_RESERVE_S = 20  # seconds of --budget kept for the measurement's report and the result (a 6 min tune ran 6:11)


class TuneError(RuntimeError):
    pass


@dataclass(frozen=True)
class Setup:
    """What the steps read, fixed when the tune starts (frozen: a step returns what it found, the pipeline carries
    it; only the progress file and the phases' clock are written as the tune goes)."""

    prefix: Path
    caps: Capabilities
    cfg: BenchConfig
    store: ResultStore
    work: Path
    lengths: list[int]
    names: list[str]
    probe_tasks: list[Task]
    deadline: float
    started: float
    progress: Progress
    facts: dict[str, Any]
    probe_until: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # the pipeline's clock (:meth:`phase`)
    meter: progress.ProgressFile = field(default_factory=progress.ProgressFile)  # --progress-file
    top: int = 3  # candidates measured besides the engine's default (--top, else per build: 3 on a GPU, 1 on a CPU)
    ngram_probes: bool = True  # each n-gram type probed before the measurement (--ngram-probes)
    # the workloads' shares the measurement plans by and the choice weighs by (--mix, else the task set's own,
    # :func:`specops.tune.rule.planned`), and how the record says they were formed
    shares: dict[str, float] | None = None
    shares_how: str = ""
    mix: dict[str, float] | None = None  # --mix, normalised (zero shares left out); None: no --mix

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def phase(self, name: str, since: float) -> float:
        """Record a phase's seconds; returns now (the next phase's start)."""
        now = time.monotonic()
        self.phases[name] = round(now - since, 1)
        return now
