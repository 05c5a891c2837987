"""Acceptance figures from llama-server's per-request log line (for builds without spec counters).

``slot print_timing: id  0 | task 25 | draft acceptance = 0.75000 (   18 accepted /    24 generated),``
``mean len =  7.00`` (one line).

``generated`` is the number of draft tokens; ``mean len`` is ``1 + accepted / drafts``, so the number of
verification steps is recovered as ``round(accepted / (mean_len - 1))`` (approximate: the log prints two
decimals; unknown when nothing was accepted).
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass

ACCEPTANCE_RE = re.compile(
    r"draft acceptance\s*=\s*(?P<rate>[-+0-9.eEnaNinfINF]+)\s*"
    r"\(\s*(?P<accepted>\d+)\s+accepted\s*/\s*(?P<generated>\d+)\s+generated\s*\)"
    r"(?:\s*,\s*mean len\s*=\s*(?P<mean_len>[-+0-9.eEnaNinfINF]+))?"
)
MAX_LINE = 4096
MAX_TOKENS = 10**9


@dataclass(frozen=True)
class AcceptanceLine:
    accepted: int
    generated: int
    mean_len: float | None

    @property
    def drafts(self) -> int | None:
        if self.mean_len is None or not math.isfinite(self.mean_len) or self.mean_len <= 1.0:
            return None
        return max(1, round(self.accepted / (self.mean_len - 1.0)))


def parse_acceptance_line(line: str) -> AcceptanceLine | None:
    """The figures of one log line, or None when it is not a (sane) acceptance line."""
    if len(line) > MAX_LINE or "draft acceptance" not in line:
        return None
    m = ACCEPTANCE_RE.search(line)
    if not m:
        return None
    accepted, generated = int(m.group("accepted")), int(m.group("generated"))
    if accepted > generated or generated > MAX_TOKENS:
        return None
    mean_len: float | None = None
    if m.group("mean_len"):
        try:
            mean_len = float(m.group("mean_len"))
        except ValueError:
            mean_len = None
        if mean_len is not None and not math.isfinite(mean_len):
            mean_len = None
    return AcceptanceLine(accepted, generated, mean_len)


@dataclass(frozen=True)
class LogCounters:
    lines: int = 0
    accepted: int = 0
    generated: int = 0
    drafts: int = 0
    drafts_unknown: int = 0  # lines whose step count could not be recovered


class LogAcceptance:
    """Thread-safe running totals over acceptance lines (exporter-lifetime counters)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c = LogCounters()

    def feed(self, line: str) -> bool:
        parsed = parse_acceptance_line(line)
        if parsed is None:
            return False
        drafts = parsed.drafts
        with self._lock:
            c = self._c
            self._c = LogCounters(
                lines=c.lines + 1,
                accepted=c.accepted + parsed.accepted,
                generated=c.generated + parsed.generated,
                drafts=c.drafts + (drafts or 0),
                drafts_unknown=c.drafts_unknown + (drafts is None and parsed.generated > 0),
            )
        return True

    def snapshot(self) -> LogCounters:
        with self._lock:
            return self._c
