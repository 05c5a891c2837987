"""Log an endpoint's state changes ("shape", "ok again", ...) without flooding the journal nor hiding an outage.

Only *repeats* are held back: a failure whose state and message (digits aside) this endpoint already logged
(or held back) within the last ``period`` seconds, and the recovery from such a failure. They are counted, with
one summary line per ``period`` at most ("N state changes not logged in the last Ts, ..., now S"). Never held
back:

* the first occurrence of a state (a new error kind) or of a new message in it (NaN after garbage, an HTML
  page after an empty body): up to ``messages`` different messages per state and period, so a body that is
  different garbage on every pass cannot flood the journal either;
* the start of an outage: a failure that is not a repeat at once, a repeated one as soon as it has lasted
  ``hold`` seconds ("... (down for 10.0 s)");
* the end of every outage whose start was logged, with its duration ("ok again after 31.2 s (was http_5xx)").

The first state, when it is ``ok``, says nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("specops.exporter")

OK = "ok"
_DIGITS = re.compile(r"\d+")


def message_key(message: str) -> str:
    """What makes two messages the same one: all but their numbers (counts, values, times, ports)."""
    return _DIGITS.sub("#", message)


@dataclass
class _Endpoint:
    state: str | None = None
    message: str = ""
    down_since: float | None = None  # start of the current outage (a state other than ok)
    down_logged: bool = False  # a line of the current outage was logged: its end will be too
    recent: dict[tuple[str, str], float] = field(default_factory=dict)  # (state, message key) -> last logged
    held: int = 0  # state changes not logged since ``held_since``
    held_since: float = 0.0
    held_last: str = ""  # the last change held back, for the summary


class StateLog:
    """Not thread-safe by itself: the caller holds a lock."""

    def __init__(self, clock: Callable[[], float], period: float = 60.0, hold: float = 10.0,
                 messages: int = 3) -> None:
        self.clock = clock
        self.period = period
        self.hold = hold
        self.messages = messages
        self._endpoints: dict[str, _Endpoint] = {}

    def state(self, endpoint: str, state: str, message: str) -> None:
        now = self.clock()
        e = self._endpoints.setdefault(endpoint, _Endpoint())
        e.recent = {k: t for k, t in e.recent.items() if t > now - self.period}
        previous = e.state
        if state == previous:
            if state != OK:
                self._still_down(endpoint, e, message, now)
        elif state == OK:
            self._up(endpoint, e, previous, now)
        else:
            if e.down_since is None:  # an outage starts (from ok, or at the first pass)
                e.down_since, e.down_logged = now, False
            e.state, e.message = state, message
            if self._repeat(e, state, message):
                self._held(e, now, f"{state}: {message}")
            else:
                self._down_line(endpoint, e, now, "")
        self._summary(endpoint, e, now)

    # ---- the three kinds of change ----------------------------------------------------------------------------
    def _up(self, endpoint: str, e: _Endpoint, previous: str | None, now: float) -> None:
        e.state, e.message = OK, ""
        if previous is not None:
            since = e.down_since if e.down_since is not None else now
            if e.down_logged:
                log.info("%s: ok again after %.1f s (was %s)", endpoint, now - since, previous)
            else:
                self._held(e, now, f"ok again after {now - since:.1f} s (was {previous})")
        e.down_since, e.down_logged = None, False

    def _still_down(self, endpoint: str, e: _Endpoint, message: str, now: float) -> None:
        if message_key(message) != message_key(e.message):
            e.message = message
            if not self._repeat(e, e.state or "", message):  # same kind, a new message: said at once
                self._down_line(endpoint, e, now, "")
                return
        since = e.down_since if e.down_since is not None else now
        if not e.down_logged and now - since >= self.hold:  # a repeated failure that lasts is an outage
            self._down_line(endpoint, e, now, f" (down for {now - since:.1f} s)")

    # ---- helpers ----------------------------------------------------------------------------------------------
    def _repeat(self, e: _Endpoint, state: str, message: str) -> bool:
        """Logged (or held back as a repeat) within the period, or this state has had its share of messages there.
        A repeat keeps its message recent: an endpoint that flaps on gets summaries, not the line again."""
        key = (state, message_key(message))
        if key in e.recent:
            e.recent[key] = self.clock()
            return True
        return sum(s == state for s, _ in e.recent) >= self.messages

    def _down_line(self, endpoint: str, e: _Endpoint, now: float, suffix: str) -> None:
        log.warning("%s: %s: %s%s", endpoint, e.state, e.message, suffix)
        e.recent[(e.state or "", message_key(e.message))] = now
        e.down_logged = True

    def _held(self, e: _Endpoint, now: float, what: str) -> None:
        if not e.held:
            e.held_since = now
        e.held += 1
        e.held_last = what

    def _summary(self, endpoint: str, e: _Endpoint, now: float) -> None:
        if not e.held or now - e.held_since < self.period:
            return
        state = e.state or OK
        level = logging.INFO if state == OK else logging.WARNING
        detail = f": {e.message}" if state != OK and e.message else ""
        log.log(level, "%s: %d state changes not logged in the last %.0fs (repeats; the last: %s), now %s%s",
                endpoint, e.held, now - e.held_since, e.held_last, state, detail)
        e.held = 0
