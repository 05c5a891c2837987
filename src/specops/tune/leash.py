"""The tune's leash: a tune started by a deploy stops itself when that deploy is gone (issue 51).

The deploy (roles/llama_server_tune/tasks/run.yml) runs ``specops tune`` in a transient systemd unit and polls it; every
poll touches a heartbeat file. The tune stops, exits :data:`STOPPED` and says why in one line (``stopped: <why>``),
writing nothing to ``--out``, when

- the heartbeat file (``--heartbeat``) is older than ``--heartbeat-timeout``: the controller stopped polling (a
  Ctrl-C, a lost connection, a killed ``ansible-playbook``);
- the deploy lock (``--lock``, roles/deploy_lock) no longer names this run (``--lock-run-id``): released, taken over
  by a later deploy, or unreadable;
- it is sent SIGTERM: its unit was stopped (the hard limit of its budget, or a later deploy stopping a leftover).

The leash is looked at wherever the tune reports progress (:class:`specops.tune.progress.ProgressFile`: per phase,
per probe, per measured block), every few seconds by a watchdog thread, which interrupts the main thread (SIGUSR1) so
that a tune in the middle of a probe or a block stops too, and once more, under the lock's guard, right before the
result is written (:meth:`Leash.last_look`). Without ``--heartbeat`` and ``--lock`` nothing is watched.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

STOPPED = 4  # exit status of a tune stopped by its leash
WATCH_S = 5.0  # the watchdog's period
GIVE_UP_S = 60.0  # after interrupting the main thread: exit outright when it has not ended by then
LOCK = "the deploy's lock is no longer this run's"


class Stopped(BaseException):
    """The tune stops (a BaseException, as KeyboardInterrupt: nothing that catches Exception swallows it, e.g. a probe
    whose failure is a finding); ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def line(self, out: Path | str | None = None) -> str:
        return f"stopped: {self.reason}" + (f"; {out} was not written" if out else "")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--heartbeat", type=Path, metavar="FILE",
                   help="the deploy touches this file while it watches the tune: stop (exit 4, --out untouched) when "
                        "it is older than --heartbeat-timeout")
    p.add_argument("--heartbeat-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how old --heartbeat may get (default 60)")
    p.add_argument("--lock", type=Path, metavar="FILE",
                   help="the deploy lock (JSON naming its holder's run_id): stop (exit 4, --out untouched) when it no "
                        "longer names --lock-run-id")
    p.add_argument("--lock-run-id", default="", metavar="ID",
                   help="the run that started this tune (default: the one --lock names when the tune starts)")


class Leash:
    """What the tune looks at (``check``), and, used as a context manager in the main thread, its SIGTERM handler
    and the watchdog thread (only when there is something to watch). ``clock`` is the host's wall clock (the
    heartbeat's mtime is compared with it)."""

    def __init__(self, heartbeat: Path | str | None = None, heartbeat_timeout: float = 60.0,
                 lock: Path | str | None = None, run_id: str = "", clock: Callable[[], float] = time.time,
                 watch_s: float = WATCH_S) -> None:
        self.heartbeat = Path(heartbeat) if heartbeat else None
        self.heartbeat_timeout = heartbeat_timeout
        self.lock = Path(lock) if lock else None
        self.run_id = run_id or (self.holder() if self.lock else "")  # no run named: the one holding it now
        self.clock = clock
        self.watch_s = watch_s
        self.started = clock()
        self.broken = ""  # why it stopped (sticky)
        self.final = False  # past the last look: the watchdog interrupts nothing any more
        self._raised = False
        self._saved: dict[int, Any] = {}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._main = 0

    @classmethod
    def of(cls, args: argparse.Namespace) -> Leash:
        return cls(getattr(args, "heartbeat", None), getattr(args, "heartbeat_timeout", 60.0),
                   getattr(args, "lock", None), getattr(args, "lock_run_id", ""))

    @property
    def watched(self) -> bool:
        return self.heartbeat is not None or self.lock is not None

    # -- the checks

    def heartbeat_reason(self) -> str:
        if self.heartbeat is None:
            return ""
        try:
            last = self.heartbeat.stat().st_mtime
        except OSError:
            last = self.started  # not there (yet): counted from the tune's start
        age = self.clock() - last
        if age <= self.heartbeat_timeout:
            return ""
        return (f"no heartbeat from the deploy for {age:.0f} s ({self.heartbeat}, --heartbeat-timeout "
                f"{self.heartbeat_timeout:g}): the deploy stopped watching")

    def holder(self) -> str:
        """The run id the lock names now ('' = none, or unreadable)."""
        try:
            holder = json.loads(self.lock.read_text(encoding="utf-8")) if self.lock else None
        except (OSError, ValueError):
            return ""
        return str(holder.get("run_id") or "") if isinstance(holder, dict) else ""

    def lock_reason(self) -> str:
        if self.lock is None:
            return ""
        try:
            text = self.lock.read_text(encoding="utf-8")
        except FileNotFoundError:
            return f"{LOCK} ({self.lock} is gone: released)"
        except OSError as exc:
            return f"{LOCK} ({self.lock} cannot be read: {exc.strerror or exc})"
        try:
            holder = json.loads(text)
        except ValueError:
            holder = None
        if not isinstance(holder, dict) or not holder.get("run_id"):
            return f"{LOCK} ({self.lock} is unreadable: no holder in it)"
        if holder["run_id"] != self.run_id:
            who = ", ".join(f"{k} {holder[k]}" for k in ("pid", "controller") if holder.get(k))
            return (f"{LOCK} ({self.lock} names run {holder['run_id']}{f' ({who})' if who else ''}, not "
                    f"{self.run_id}: another deploy took it over)")
        return ""

    def reason(self) -> str:
        """Why the tune must stop now ('' = it goes on)."""
        return self.broken or self.lock_reason() or self.heartbeat_reason()

    def check(self) -> None:
        """Raises :class:`Stopped` when the tune must stop."""
        why = self.reason()
        if why:
            self.broken = why
            self._raised = True
            raise Stopped(why)

    @contextlib.contextmanager
    def last_look(self) -> Iterator[None]:
        """The check before the result is written, with the lock's guard held (roles/deploy_lock serialises its
        check-and-write on LOCK.guard with flock): no deploy takes the lock over between this look and the writes in
        the block, and the watchdog interrupts nothing after it."""
        guard = None
        if self.lock is not None:
            with contextlib.suppress(OSError):
                guard = open(f"{self.lock}.guard", "a")  # noqa: SIM115 (held across the yield)
                fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            self.check()
            self.final = True
            yield
        finally:
            if guard is not None:
                fcntl.flock(guard, fcntl.LOCK_UN)
                guard.close()

    def measured(self, rc: int) -> None:
        """After the side-by-side measurement (specops bench, run in-process): the bench turns SIGTERM and SIGINT into
        its exit 130 and keeps its own SIGTERM handler; the leash's comes back, and an interrupted measurement
        stops the tune (nothing is chosen from a measurement cut short by a signal)."""
        if self._saved and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
        if rc == 130:
            self.broken = self.broken or ("interrupted during the side-by-side measurement (SIGINT, or SIGTERM: its "
                                          "unit was stopped)")
            self._raised = True
            raise Stopped(self.broken)

    # -- signals and the watchdog

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            self.broken = self.broken or ("terminated (SIGTERM): under the deploy, its unit was stopped (the hard "
                                          "limit of its budget, or a later deploy stopping a leftover)")
        if self._raised:  # already stopping (servers being stopped): let that finish
            return
        self._raised = True
        raise Stopped(self.broken or "interrupted")

    def _watch(self) -> None:
        while not self._done.wait(self.watch_s):
            if self.final:
                return
            why = self.reason()
            if not why:
                continue
            self.broken = why
            if self.final:
                return
            signal.pthread_kill(self._main, signal.SIGUSR1)
            if not self._done.wait(GIVE_UP_S):
                print(f"{Stopped(why).line()} (the tune did not end {GIVE_UP_S:.0f} s after it was told: exiting)",
                      flush=True)
                os._exit(STOPPED)
            return

    def __enter__(self) -> Leash:
        if threading.current_thread() is threading.main_thread():
            self._main = threading.get_ident()
            self._saved = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGUSR1)}
            if self.watched:
                self._thread = threading.Thread(target=self._watch, name="specops-tune-leash", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved = {}

