"""The requests a soak sends: the bench's standard task set (or the operator's files), greedy and
without prompt-cache reuse, so answers can be compared over the whole run."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any

from specops.bench.tasks import Task, load_tasks

# Greedy and uncached: the reference comparison needs determinism, and a cached prompt would make
# later requests cheaper than the first (see FACTS: benchmark traps).
REQUEST_PARAMS: dict[str, Any] = {"temperature": 0.0, "top_k": 1, "seed": 42, "cache_prompt": False}


def load(task_files: tuple[str, ...] = (), workloads: tuple[str, ...] = ()) -> list[Task]:
    return load_tasks(list(task_files) or None, workloads=list(workloads) or None)


def pick_references(tasks: list[Task], n: int) -> list[Task]:
    """``n`` tasks spread across workloads (round-robin over workloads in file order)."""
    by_workload: dict[str, list[Task]] = {}
    for t in tasks:
        by_workload.setdefault(t.workload, []).append(t)
    out: list[Task] = []
    i = 0
    while len(out) < n and any(i < len(v) for v in by_workload.values()):
        for group in by_workload.values():
            if i < len(group) and len(out) < n:
                out.append(group[i])
        i += 1
    return out


@dataclass
class Job:
    kind: str  # "load" | "reference"
    task: Task


class Mixer:
    """Hands out jobs: the task set shuffled (seeded) and cycled; a reference check when one is due."""

    def __init__(self, tasks: list[Task], references: list[Task], reference_interval: float,
                 seed: int = 42) -> None:
        if not tasks:
            raise ValueError("no tasks to send")
        self._lock = threading.Lock()
        self._tasks = list(tasks)
        random.Random(seed).shuffle(self._tasks)
        self._i = 0
        self._refs = references
        self._ref_i = 0
        self._interval = reference_interval
        self._next_ref: float = reference_interval

    def next(self, now: float) -> Job:
        with self._lock:
            if self._refs and now >= self._next_ref:
                self._next_ref = now + self._interval
                task = self._refs[self._ref_i % len(self._refs)]
                self._ref_i += 1
                return Job("reference", task)
            task = self._tasks[self._i % len(self._tasks)]
            self._i += 1
            return Job("load", task)
