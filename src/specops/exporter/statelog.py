"""Log an endpoint's state changes ("shape", "ok again", ...) without flooding the journal.

A change is logged when it happens, unless the endpoint already logged ``free`` changes within the last
``period`` seconds: then it is *flapping*, and its changes are only counted, with one summary line per
``period`` at most ("N state changes in the last Ts, now S"). A period without changes ends the flapping
with one last line naming the state it settled in.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("specops.exporter")


@dataclass
class _Endpoint:
    state: str | None = None
    message: str = ""
    lines: deque[float] = field(default_factory=deque)  # times of change lines within the last period
    last_line: float = float("-inf")
    last_change: float = float("-inf")
    flapping: bool = False
    changes: int = 0  # while flapping: changes since the last line
    since: float = 0.0


class StateLog:
    """Not thread-safe by itself: the caller holds a lock."""

    def __init__(self, clock: Callable[[], float], period: float = 60.0, free: int = 2) -> None:
        self.clock = clock
        self.period = period
        self.free = free
        self._endpoints: dict[str, _Endpoint] = {}

    def state(self, endpoint: str, state: str, message: str) -> None:
        now = self.clock()
        e = self._endpoints.setdefault(endpoint, _Endpoint())
        while e.lines and e.lines[0] <= now - self.period:
            e.lines.popleft()
        previous, changed = e.state, e.state != state
        if changed:
            e.state, e.message, e.last_change = state, message, now
        if changed and previous is None and state == "ok":
            return  # the first state, and a good one: nothing to say
        if changed and not e.flapping and len(e.lines) < self.free:
            self._line(e, now)
            if state == "ok":
                log.info("%s: ok again (was %s)", endpoint, previous)
            else:
                log.warning("%s: %s: %s", endpoint, state, message)
            return
        if changed:
            if not e.flapping:
                e.flapping, e.changes, e.since = True, 0, e.last_line
            e.changes += 1
        if e.flapping and now - e.last_line >= self.period:
            self._summary(endpoint, e, now)

    def _line(self, e: _Endpoint, now: float) -> None:
        e.lines.append(now)
        e.last_line = now

    def _summary(self, endpoint: str, e: _Endpoint, now: float) -> None:
        level = logging.INFO if e.state == "ok" else logging.WARNING
        detail = f": {e.message}" if e.state != "ok" and e.message else ""
        if e.changes:
            log.log(level, "%s: flapping: %d state changes in the last %.0fs, now %s%s", endpoint, e.changes,
                    now - e.since, e.state, detail)
        else:
            log.log(level, "%s: steady again for %.0fs: %s%s", endpoint, now - e.last_change, e.state, detail)
            e.flapping = False
        e.changes, e.since = 0, now
        self._line(e, now)
