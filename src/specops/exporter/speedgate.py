"""The deploy's speed-gate record (``/etc/specops/speed-gate.json``), read for the exporter.

The deploy measures the speculative service against plain decoding of the same build on this host and keeps
the figures there (:mod:`specops.speedgate`). Exported per instance, Prometheus can compare the service's
decode speed with this host's own plain-decoding figure and alert when speculation starts losing, and judge
acceptance against this host's own break-even. A file that is missing, unreadable or malformed gives no
series at all: no number beats a wrong one.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_NUMBERS = ("plain_tps", "speculative_tps", "ratio", "break_even_acceptance", "min_ratio")
_LABELS = ("verdict", "action", "serving", "spec_type", "mode", "measured_at", "build_id")


@dataclass(frozen=True)
class SpeedGate:
    numbers: dict[str, float]
    labels: dict[str, str]
    mtime: float


def parse(data: Any, mtime: float = 0.0) -> SpeedGate | None:
    """The record's numbers (finite, positive rates) and labels; None when it is not a record."""
    if not isinstance(data, dict):
        return None
    numbers: dict[str, float] = {}
    for key in _NUMBERS:
        v = data.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            return None
        numbers[key] = float(v)
    if not numbers.get("plain_tps") or not numbers.get("speculative_tps"):
        return None
    labels = {k: str(data.get(k, "")) for k in _LABELS}
    if labels["verdict"] not in ("pays", "loses"):  # "unproven" included: its figures are not a measurement
        return None
    return SpeedGate(numbers, labels, mtime)


class SpeedGateFile:
    """Re-read the file when it changes; remember nothing of a file that went bad."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._cached: SpeedGate | None = None
        self._mtime: float | None = None
        self._warned = False

    def read(self) -> SpeedGate | None:
        if not self.path:
            return None
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            self._cached, self._mtime = None, None
            return None
        if mtime == self._mtime:
            return self._cached
        self._mtime = mtime
        data: Any = None
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
            self._cached = parse(data, mtime)
        except (OSError, ValueError):
            self._cached = None
        if isinstance(data, dict) and data.get("verdict") == "unproven":
            # the gate could not measure cleanly (traffic, noise): a valid record with no figures to stand on
            log.info("speed gate record %s: unproven (%s): no speed-gate series until it is measured again",
                     self.path, data.get("unproven_because", "?"))
            self._warned = False
        elif self._cached is None and not self._warned:
            log.warning("speed gate record %s is not a valid record: its series are left out", self.path)
            self._warned = True
        elif self._cached is not None:
            self._warned = False
        return self._cached
