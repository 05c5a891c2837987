"""The exporter's own health: scrape durations and errors per endpoint and kind; state changes logged (repeats
rate-limited, outages never hidden: :mod:`specops.exporter.statelog`)."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specops.exporter.statelog import StateLog

HTTP_ENDPOINTS = ("health", "metrics", "slots", "props")
# endpoint -> error kinds (pre-initialised to 0 so dashboards and rate() see the series from the start)
_TRANSPORT = ("connect", "timeout", "protocol", "auth", "http_4xx", "http_5xx", "too_large")  # auth: HTTP 401/403
ERROR_KINDS: dict[str, tuple[str, ...]] = {
    "health": (*_TRANSPORT, "invalid_json", "shape"),
    "metrics": (*_TRANSPORT, "parse", "shape", "invalid_value", "invalid"),  # invalid: cut or duplicated body
    "slots": (*_TRANSPORT, "invalid_json", "shape"),
    "props": (*_TRANSPORT, "invalid_json", "shape"),
    "process": ("not_found", "gone", "access_denied", "systemctl", "other"),
    "gpu": ("error",),
    "log": ("error",),
    "build_info": ("error",),
}
DURATION_ENDPOINTS = (*HTTP_ENDPOINTS, "process", "gpu")
HistogramData = tuple[list[tuple[str, float]], float]
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            acc += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(acc)))
        return out


class SelfMetrics:
    """Thread-safe counters and histograms; ``condition()`` logs an endpoint's state changes (repeats of one
    message rate-limited, new errors and the start and end of an outage always: :mod:`specops.exporter.statelog`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.errors: dict[tuple[str, str], int] = {
            (e, k): 0 for e, kinds in ERROR_KINDS.items() for k in kinds}
        self.durations: dict[str, Histogram] = {e: Histogram() for e in DURATION_ENDPOINTS}
        self.cycles = 0
        self._log = StateLog(clock)

    def error(self, endpoint: str, kind: str, message: str) -> None:
        with self._lock:
            key = (endpoint, kind)
            self.errors[key] = self.errors.get(key, 0) + 1
        self.condition(endpoint, kind, message)

    def ok(self, endpoint: str) -> None:
        self.condition(endpoint, "ok", "")

    def condition(self, endpoint: str, state: str, message: str) -> None:
        with self._lock:
            self._log.state(endpoint, state, message)

    def observe(self, endpoint: str, seconds: float) -> None:
        with self._lock:
            self.durations.setdefault(endpoint, Histogram()).observe(seconds)

    def copy(self) -> tuple[dict[tuple[str, str], int], dict[str, HistogramData], int]:
        with self._lock:
            return (dict(self.errors),
                    {e: (h.cumulative(), h.total) for e, h in self.durations.items()},
                    self.cycles)
