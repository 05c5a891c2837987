"""Counter increases over a trailing time window, from consistent passes only.

The window holds one *segment*: consecutive good passes with the same source and the same set of counters,
in which no counter went down. Anything else starts a new segment: a known restart (PID change), another
source, a counter that vanished, any counter going backwards. A counter that appears is a labelled series
created at its first increment: it was zero in the segment's earlier passes. The caller restarts the window
outright after a pass that was not good. Every increase is then ``last - first`` within one segment, so it is
never negative and all counters' increases cover exactly the same passes: a ratio of two of them compares like
with like.

**A decrease is remembered.** After a counter goes down (a restart or not: without a PID the exporter's
restart signal is that very decrease), the pass that went down is the new segment's first point, and the level
the counter had before the decrease is remembered (through bad passes and restarts of the window) until it is
reached again; after several decreases (two servers, restarts) each of their levels is. A pass that brings a
counter back to such a level is not traffic but, as far as the counters can tell, the old counters again (a
proxy flapping between two servers, a restarted server replaced by the old one): it starts a new segment too,
so no increase ever spans a decrease or the jump back after it. A restarted server that merely grows past its
old level costs one interval once; a wrong figure would cost more.

Points older than twice the window leave it; fewer than two points left means no figure at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

MAX_LEVELS = 8  # levels from before a decrease remembered per counter (a crash loop never reaching them)


@dataclass(frozen=True)
class _Point:
    t: float
    values: Mapping[str, float]


class CounterWindow:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._points: deque[_Point] = deque()
        self._source = ""
        self._seen: Mapping[str, float] | None = None  # the last good pass, kept through restarts of the window
        # counter -> its levels before it went down (highest first), each until reached again
        self._before_drop: dict[str, list[float]] = {}

    def restart(self) -> None:
        self._points.clear()

    def _went_down(self, values: Mapping[str, float], source: str) -> dict[str, float]:
        """The counters lower than in the last good pass of the same source, at their level there."""
        seen = self._seen
        if seen is None or source != self._source:
            return {}
        return {k: seen[k] for k, v in values.items() if k in seen and v < seen[k]}

    def _jumps_back(self, values: Mapping[str, float]) -> bool:
        """A counter that went down is back at (or past) its level before the decrease."""
        return any(k in values and values[k] >= levels[-1] for k, levels in self._before_drop.items())

    def reference(self, values: Mapping[str, float], source: str = "",
                  reset: bool = False) -> Mapping[str, float] | None:
        """The last good pass when this one comes from the same counters (no restart, same source, nothing went
        down nor jumped back since), even across bad passes: what its increases are checked against."""
        if reset or self._seen is None or source != self._source:
            return None
        if self._went_down(values, source) or self._jumps_back(values):
            return None
        return self._seen

    def refuse(self, values: Mapping[str, float], source: str = "") -> None:
        """A pass read whole whose counters contradict the last one's: the window restarts without it."""
        self._points.clear()
        self._seen, self._source = dict(values), source

    def observe(self, t: float, values: Mapping[str, float], source: str = "", reset: bool = False) -> bool:
        """Add one good pass; True when it starts a new segment."""
        last = self._points[-1] if self._points else None
        new_segment = (last is None or self.reference(values, source, reset) is None
                       or not values.keys() >= last.values.keys())
        down = self._went_down(values, source)
        if source != self._source:  # other counters altogether: nothing to come back to
            self._before_drop = {}
        else:  # levels reached again are forgotten (after the one new segment that reaching them started)
            kept = {k: [level for level in levels if k not in values or values[k] < level]
                    for k, levels in self._before_drop.items()}
            for k, level in down.items():  # several servers or restarts: each level counts, the highest most
                kept[k] = sorted({*kept.get(k, []), level}, reverse=True)[:MAX_LEVELS]
            self._before_drop = {k: levels for k, levels in kept.items() if levels}
        if new_segment:
            self._points.clear()
            self._source = source
        elif last is not None and values.keys() != last.values.keys():
            # a labelled series appears the first time it is incremented (llama-server's per-position
            # acceptance): absent from the same process's earlier passes means zero there
            grown = values.keys() - last.values.keys()
            self._points = deque(_Point(p.t, {**p.values, **dict.fromkeys(grown, 0.0)}) for p in self._points)
        self._points.append(_Point(t, dict(values)))
        self._seen = dict(values)
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

    def ends(self, name: str) -> tuple[float, float] | None:
        """``name`` at the segment's first and last point; None without two points."""
        if len(self._points) < 2 or name not in self._points[-1].values:
            return None
        return self._points[0].values[name], self._points[-1].values[name]

    def increase(self, name: str) -> float | None:
        """Increase of ``name`` across the segment; None without two points."""
        ends = self.ends(name)
        return None if ends is None else ends[1] - ends[0]

    def ratio(self, num: str, den: str) -> float | None:
        n, d = self.increase(num), self.increase(den)
        if n is None or d is None or d <= 0:
            return None
        return n / d
