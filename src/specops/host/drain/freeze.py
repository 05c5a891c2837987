"""The frozen look: the server stopped (SIGSTOP) while the drain reads its connections, and SIGTERM sent while it is
still stopped, taken as it resumes (SIGCONT)."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def all_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (or gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("t", "T", "Z", "X"):
            return False
    return True


def freeze(pid: int, pidfd: int, timeout: float = 2.0) -> bool:
    """SIGSTOP, then wait until every thread has stopped; False when one had not within ``timeout`` s (a thread in
    uninterruptible sleep). The caller sends SIGCONT either way (``thaw``)."""
    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
    end = time.monotonic() + timeout
    while not all_stopped(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def thaw(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGCONT)


def signal_frozen(pid: int, pidfd: int) -> bool:
    """SIGTERM while the process is stopped (taken as it resumes, before a request that reached the kernel meanwhile
    can become a task: see hold_then_stop); False where it did not stop."""
    try:
        if not freeze(pid, pidfd):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        return True
    except ProcessLookupError:
        return True
    finally:
        thaw(pidfd)
