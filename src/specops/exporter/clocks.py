"""The exporter's clocks, in one injectable bundle so tests and golden expositions can fix time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clocks:
    monotonic: Callable[[], float] = time.monotonic  # windows, staleness, log throttling
    wall: Callable[[], float] = time.time  # exported timestamps (Unix time)
    perf: Callable[[], float] = time.perf_counter  # scrape durations
