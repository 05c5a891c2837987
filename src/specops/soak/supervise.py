"""A tiny ``Restart=always`` for llama-server processes the soak starts itself (no systemd on the machine):
when the process exits it starts a new one on the same port, so kill -9 faults can be recovered from."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from specops.exporter.process import PidInfo
from specops.server import ServerProcess, ServerStartError

log = logging.getLogger(__name__)


class Supervisor:
    """Watches ``first`` and replaces it with ``make(n)`` (n = 1, 2, ...) whenever it has exited."""

    def __init__(self, first: ServerProcess, make: Callable[[int], ServerProcess], poll: float = 0.2) -> None:
        self.first = first
        self.current = first
        self.make = make
        self.poll = poll
        self.spawned: list[ServerProcess] = []
        self.restarts = 0
        self.start_errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            proc = self.current.proc
            if proc is None or proc.poll() is None:
                continue
            log.warning("%s exited with %s: starting a new one", self.current.base_url, proc.returncode)
            with self._lock:
                nxt = self.make(len(self.spawned) + 1)
                self.spawned.append(nxt)
                self.current = nxt
                self.restarts += 1
            try:
                nxt.start()
            except ServerStartError as exc:  # counted; the next poll sees the exit and tries again
                self.start_errors.append(str(exc).splitlines()[0])

    def pid(self) -> int | None:
        with self._lock:
            proc = self.current.proc
            return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=300)
        self.current.stop()
        for s in self.spawned:
            s.stop()

    def __enter__(self) -> Supervisor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SupervisedPid:
    """The PID source of a supervised server (the soak's sampler and fault injector ask it)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def find(self) -> PidInfo:
        return PidInfo(self.supervisor.pid())

    def forget(self) -> None:
        pass

    def describe(self) -> str:
        return f"supervised:{self.supervisor.current.base_url}"
