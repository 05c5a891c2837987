"""Counter increases over a trailing time window, from consistent passes only.

The window holds one *segment*: consecutive good passes with the same source and the same set of counters,
in which no counter went down. Anything else starts a new segment: a known restart (PID change), another
source, a counter that vanished, any counter going backwards. A counter that appears is a labelled series
created at its first increment: it was zero in the segment's earlier passes. The caller restarts the window
outright after a pass that was not good. Every increase is then ``last - first`` within one segment, so it is
never negative and all counters' increases cover exactly the same passes: a ratio of two of them compares like
with like.

Points older than twice the window leave it; fewer than two points left means no figure at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class _Point:
    t: float
    values: Mapping[str, float]


class CounterWindow:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._points: deque[_Point] = deque()
        self._source = ""

    def restart(self) -> None:
        self._points.clear()

    def observe(self, t: float, values: Mapping[str, float], source: str = "", reset: bool = False) -> bool:
        """Add one good pass; True when it starts a new segment."""
        last = self._points[-1] if self._points else None
        new_segment = (
            reset or last is None or source != self._source or not values.keys() >= last.values.keys()
            or any(v < last.values.get(k, 0.0) for k, v in values.items())
        )
        if new_segment:
            self._points.clear()
            self._source = source
        elif values.keys() != last.values.keys():
            # a labelled series appears the first time it is incremented (llama-server's per-position
            # acceptance): absent from the same process's earlier passes means zero there
            grown = values.keys() - last.values.keys()
            self._points = deque(_Point(p.t, {**p.values, **dict.fromkeys(grown, 0.0)}) for p in self._points)
        self._points.append(_Point(t, dict(values)))
        self._trim(t)
        return new_segment

    def _trim(self, now: float) -> None:
        while self._points and self._points[0].t < now - 2 * self.seconds:
            self._points.popleft()
        # keep one point at or before the window start so the window is fully covered
        while len(self._points) >= 2 and self._points[1].t <= now - self.seconds:
            self._points.popleft()

    def live_until(self) -> float:
        """Until when the window holds two points within twice its length (-inf: it does not now)."""
        if len(self._points) < 2:
            return float("-inf")
        return self._points[-2].t + 2 * self.seconds

    def increase(self, name: str) -> float | None:
        """Increase of ``name`` across the segment; None without two points."""
        if len(self._points) < 2 or name not in self._points[-1].values:
            return None
        return self._points[-1].values[name] - self._points[0].values[name]

    def ratio(self, num: str, den: str) -> float | None:
        n, d = self.increase(num), self.increase(den)
        if n is None or d is None or d <= 0:
            return None
        return n / d
