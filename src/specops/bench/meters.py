"""What the bench reads off a running llama-server besides its answers: its peak resident memory (sampled in a
background thread) and its speculative-decoding counters (from ``/metrics``, and how far they moved).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import psutil

from specops.client import (
    SPEC_ACCEPTED_PER_POS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    parse_metrics,
)


class RssSampler:
    """Peak resident set size of a process, sampled in a background thread."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.first = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        try:
            rss = int(self.proc.memory_info().rss)
        except psutil.Error:
            return 0
        self.peak = max(self.peak, rss)
        return rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> RssSampler:
        self.first = self.sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join(2)
        last = self.sample()
        return {"after_load": self.first, "peak": self.peak, "last": last}


def spec_counters(text: str) -> dict[str, Any]:
    samples = parse_metrics(text)
    out: dict[str, Any] = {"draft_tokens": 0.0, "accepted": 0.0, "drafts": 0.0, "per_pos": {}}
    for s in samples:
        if s.name == SPEC_DRAFT_TOKENS:
            out["draft_tokens"] = s.value
        elif s.name == SPEC_ACCEPTED_TOKENS:
            out["accepted"] = s.value
        elif s.name == SPEC_DRAFTS:
            out["drafts"] = s.value
        elif s.name == SPEC_ACCEPTED_PER_POS and "position" in s.labels:
            out["per_pos"][s.labels["position"]] = s.value
    return out


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    per_pos = {k: v - before["per_pos"].get(k, 0.0) for k, v in after["per_pos"].items()}
    return {
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "drafts": after["drafts"] - before["drafts"],
        "per_pos": dict(sorted(per_pos.items(), key=lambda kv: int(kv[0]))),
    }
