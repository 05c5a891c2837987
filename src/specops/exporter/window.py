"""Increases of counters over a trailing time window, with Prometheus' reset rule.

Between two consecutive samples the increase is ``cur - prev``, or ``cur`` when the counter went down
(a restart). A forced reset (PID change) applies the same rule even if the new value happens to be higher.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class _Point:
    t: float
    values: dict[str, float]
    reset: bool


class CounterWindow:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._points: deque[_Point] = deque()

    def observe(self, t: float, values: dict[str, float], reset: bool = False) -> None:
        self._points.append(_Point(t, dict(values), reset))
        # keep one point at or before the window start so the window is fully covered
        while len(self._points) >= 2 and self._points[1].t <= t - self.seconds:
            self._points.popleft()

    def clear(self) -> None:
        self._points.clear()

    def increase(self, name: str) -> float | None:
        """Sum of increases of ``name`` inside the window; None without two samples carrying it."""
        total = 0.0
        seen = False
        prev: float | None = None
        for p in self._points:
            cur = p.values.get(name)
            if cur is None:
                prev = None
                continue
            if prev is not None:
                total += cur if (p.reset or cur < prev) else cur - prev
                seen = True
            prev = cur
        return total if seen else None

    def ratio(self, num: str, den: str) -> float | None:
        n, d = self.increase(num), self.increase(den)
        if n is None or d is None or d <= 0:
            return None
        return n / d
