"""From a log's requests to a task set: de-duplicated (the same messages once, the first kept), over-long prompts
left out, labelled, and N sampled per workload (seeded: the same log, rules and seed give the same tasks; each
workload's sample depends on its own requests only)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from specops.bench.tasks import Task
from specops.requestlog.label import Rule, label
from specops.requestlog.read import Request

CHARS_PER_TOKEN = 3  # a prompt's tokens estimated from its characters: most tokenizers give 3-4 (a kept prompt fits)
TAG = "from-requests"


def estimated_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


@dataclass
class Selection:
    """The sampled tasks and the counts that say how they were chosen (no prompt text)."""

    tasks: list[Task] = field(default_factory=list)
    duplicates: int = 0
    too_long: int = 0
    available: dict[str, int] = field(default_factory=dict)  # per workload, after de-duplication and the length cut
    chars: dict[str, int] = field(default_factory=dict)  # per sampled task id: its prompt's characters


def select(requests: Sequence[Request], per_workload: int, max_chars: int, seed: int = 0,
           rules: Sequence[Rule] = ()) -> Selection:
    """``per_workload`` tasks of each workload (all of it where it has fewer), in the log's order within a workload,
    workloads sorted by name."""
    out = Selection()
    seen: set[tuple[tuple[str, str], ...]] = set()
    pools: dict[str, list[Request]] = {}
    for req in requests:
        if req.messages in seen:
            out.duplicates += 1
            continue
        seen.add(req.messages)
        if req.chars > max_chars:
            out.too_long += 1
            continue
        pools.setdefault(label(req, rules), []).append(req)
    for workload in sorted(pools):
        pool = pools[workload]
        out.available[workload] = len(pool)
        rng = random.Random(f"{seed}:{workload}")  # a str seed is hashed with SHA-512: the same in every process
        for i in sorted(rng.sample(range(len(pool)), min(per_workload, len(pool)))):
            task = Task(f"{workload}-{pool[i].line}", workload, pool[i].messages, (TAG,))
            out.tasks.append(task)
            out.chars[task.id] = pool[i].chars
    return out
