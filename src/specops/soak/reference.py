"""Greedy reference texts: recorded once at the start, every later answer to the same prompt must match."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

from specops.textdiff import first_difference


def first_divergence(expected: str, got: str) -> int | None:
    """Index of the first differing character; ``None`` when identical."""
    return first_difference(expected, got)


@dataclass(frozen=True)
class Drift:
    task_id: str
    t: float
    seq: int
    position: int
    expected: str  # a short window around the position
    got: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _window(text: str, pos: int, before: int = 20, after: int = 40) -> str:
    return text[max(0, pos - before): pos + after]


class ReferenceSet:
    """Thread-safe map of task id → the text recorded at the start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, str] = {}
        self.drifts: list[Drift] = []
        self.checks = 0

    def record(self, task_id: str, text: str) -> None:
        with self._lock:
            self._texts[task_id] = text

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._texts)

    def texts(self) -> dict[str, str]:
        with self._lock:
            return dict(self._texts)

    def check(self, task_id: str, text: str, t: float, seq: int) -> Drift | None:
        with self._lock:
            expected = self._texts[task_id]
            self.checks += 1
            pos = first_divergence(expected, text)
            if pos is None:
                return None
            drift = Drift(task_id, t, seq, pos, _window(expected, pos), _window(text, pos))
            self.drifts.append(drift)
            return drift
