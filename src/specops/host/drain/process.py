"""The server's process through a pidfd (a signal or an exit wait cannot reach a reused pid), and the drain's own
signals turned into an exception so that a hold is undone on the way out."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Iterator
from typing import NoReturn


def open_pid(pid: int) -> int | None:
    """A pidfd for ``pid`` (signals and exit waits that cannot reach a reused pid), None where there is none."""
    try:
        return os.pidfd_open(pid) if pid > 0 else None
    except OSError:   # gone already, or a kernel without pidfds (before 5.3)
        return None


def exited(pidfd: int, timeout: float) -> bool:
    """True when the process behind ``pidfd`` exits within ``timeout`` s (a pidfd reads ready once it has)."""
    return bool(select.select([pidfd], [], [], timeout)[0])


def terminate(pidfd: int, grace: float) -> bool:
    """SIGTERM through ``pidfd``; True when the process exited within ``grace`` seconds."""
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    except ProcessLookupError:
        return True
    return exited(pidfd, grace)


class Interrupted(Exception):
    pass


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGHUP, SIGINT and SIGTERM raise Interrupted in here, so that a hold is undone on the way out (a stopped
    process continued, filters taken off) instead of outliving the drain."""
    def stop(signum: int, _frame: object) -> NoReturn:
        raise Interrupted(signal.Signals(signum).name)
    saved = {s: signal.signal(s, stop) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
