"""A bench run's configuration: the target and draft models, the server binary and the knobs every arm's
llama-server is built from (:meth:`BenchConfig.profile_for`), the task set, the budget and how blocks interleave; the
synthetic acceptance a benchmark may impose (``--synth-rates``); and :class:`BenchError`, how the bench stops.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.arms import Arm
from specops.bench.ceiling import arm_n_max
from specops.bench.tasks import Task
from specops.capabilities import Capabilities
from specops.fit import GPU_BACKENDS
from specops.profile import ProfileError, ServerProfile


class BenchError(RuntimeError):
    """The bench cannot go on; the message says what happened and where partial results are."""


@dataclass
class BenchConfig:
    target: Path
    draft: Path | None
    server_binary: Path
    caps: Capabilities
    tasks: list[Task]
    max_tokens: int = 192
    seed: int = 42
    reps: int = 1
    threads: int | None = None
    draft_threads: int | None = None
    ctx_size: int = 4096
    derived_drafts: dict[str, Path] = field(default_factory=dict)
    start_timeout: float = 300.0
    budget_s: float | None = None
    # seconds one request is expected to take before any block has run (the budget's check of the first block;
    # None: the first block always runs, however long)
    request_guess_s: float | None = None
    capacity: int | None = None  # servers that fit side by side (None: all)
    interleave: str = "slices"  # slices: a block's requests time-sliced; requests: one after another
    slice_s: float = 0.5
    recycle: int | None = 8  # reload every server (in a new order) every this many blocks
    backend: str = "cpu"  # the build's (PREFIX/build-info.json); a GPU one puts every layer on the GPU
    # benchmarking only: llama.cpp's synthetic acceptance imposed on every speculative arm (knob spec_synth_rates,
    # the first n_max per-position rates): speed is the real draft's and verifier's, acceptance is imposed
    synth_rates: tuple[float, ...] = ()

    @property
    def gpu(self) -> bool:
        """A GPU build: every layer of target and draft on the GPU (a server that does not fit fails)."""
        return self.backend in GPU_BACKENDS

    def draft_for(self, arm: Arm) -> Path | None:
        if arm.draft is None:
            return None
        if arm.draft == "draft":
            if self.draft is None:
                raise BenchError(f"arm {arm.name} needs a draft model: pass --draft")
            return self.draft
        if arm.draft not in self.derived_drafts:
            raise BenchError(f"arm {arm.name} needs the {arm.draft} draft, which was not derived")
        return self.derived_drafts[arm.draft]

    def profile_for(self, arm: Arm) -> ServerProfile:
        data: dict[str, Any] = {
            "model": str(self.target),
            "ctx_size": self.ctx_size,
            "parallel": 1,
            "threads": self.threads,
            "metrics": True,
            "slots": True,
            # saved prompt states do not change decode speed; without them memory stays what the fit says
            "cache_ram_mib": 0,
        }
        if self.gpu:
            # not llama.cpp's 'auto', which fits what is free at start: the later of several servers side by side
            # would silently keep layers on the CPU and measure slower
            data["ngl"] = "all"
        data.update(arm.profile)
        draft = self.draft_for(arm)
        if draft is not None:
            data["draft_model"] = str(draft)
            if self.draft_threads is not None:
                data["draft_threads"] = self.draft_threads
            if self.gpu:
                data["draft_ngl"] = "all"
        if self.synth_rates and arm.speculative:
            data["spec_synth_rates"] = synth_rates_for(self.synth_rates, arm)
        try:
            return ServerProfile.from_dict(data)
        except ProfileError as exc:
            raise BenchError(f"arm {arm.name}: {exc}") from exc

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise BenchError(f"task {task_id} is not in the task set")


def synth_rates_for(rates: tuple[float, ...], arm: Arm) -> str:
    """The synthetic acceptance (knob ``spec_synth_rates``) for ``arm``: llama.cpp wants exactly one rate per draft
    position."""
    n = arm_n_max(arm.profile)
    if len(rates) < n:
        raise BenchError(f"arm {arm.name} drafts up to {n} tokens but the synthetic acceptance gives "
                         f"{len(rates)} rates; give one per position")
    return ",".join(f"{r:.4f}" for r in rates[:n])


def parse_rates(text: str) -> tuple[float, ...]:
    """``P0,P1,...`` (as llama-server takes them) or a JSON file with a ``rates`` list: unconditional
    per-position acceptance, each in [0, 1], non-increasing."""
    path = Path(text)
    try:
        raw = json.loads(path.read_text())["rates"] if path.is_file() else text.split(",")
        rates = tuple(float(x) for x in raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchError(f"synthetic acceptance {text!r}: want P0,P1,... or a JSON file with 'rates' ({exc})") from None
    if not rates or any(not 0 <= r <= 1 for r in rates) or any(b > a for a, b in itertools.pairwise(rates)):
        raise BenchError(f"synthetic acceptance {text!r}: rates must be within [0, 1] and non-increasing")
    return rates

