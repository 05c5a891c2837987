"""Follow llama-server's log (journal or file) and feed lines to a :class:`LogAcceptance`.

Journal: ``journalctl -u UNIT -o cat -f -n 0`` (the unit gets ``SupplementaryGroups=systemd-journal``).
File: a tail that starts at the end and reopens on rotation or truncation. Both run in a daemon thread
and restart after failures with a back-off; they never raise into the exporter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from specops.exporter.logline import MAX_LINE

log = logging.getLogger("specops.exporter.log")


class LogFollower:
    """Base: a daemon thread calling ``sink(line)``; ``errors`` counts failures."""

    def __init__(self, sink: Callable[[str], object], stop: threading.Event, retry: float = 5.0) -> None:
        self.sink = sink
        self.stop = stop
        self.retry = retry
        self.errors = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.follow()
                if self._failing:
                    log.info("log source %s: following again", self.describe())
                    self._failing = False
            except Exception as exc:  # never let the thread die
                with self._lock:
                    self.errors += 1
                if not self._failing:
                    log.warning("log source %s failed: %s (retrying every %.0fs)", self.describe(), exc,
                                self.retry)
                    self._failing = True
            self.stop.wait(self.retry)

    def _emit(self, raw: bytes) -> None:
        line = raw[:MAX_LINE].decode("utf-8", errors="replace")
        self.sink(line)

    def follow(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class JournalFollower(LogFollower):
    """``journalctl -f`` from the position the journal had when :meth:`start` returned: a line logged right after
    start is never lost to the time the thread and journalctl take to come up (it would be, with ``-n 0``)."""

    def __init__(self, unit: str, sink: Callable[[str], object], stop: threading.Event,
                 journalctl: str = "journalctl") -> None:
        super().__init__(sink, stop)
        self.unit = unit
        self.journalctl = journalctl
        self.cursor: str | None = None
        self.argv = [journalctl, "-u", unit, "-o", "cat", "-f", "-n", "0", "--no-pager"]

    def describe(self) -> str:
        return f"journal:{self.unit}"

    def start(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([self.journalctl, "-u", self.unit, "-n", "0", "--show-cursor", "-q", "--no-pager"],
                                 capture_output=True, text=True, timeout=10, check=False).stdout
            for line in out.splitlines():
                if line.startswith("-- cursor: "):
                    self.cursor = line.removeprefix("-- cursor: ").strip()
        super().start()

    def _argv(self) -> list[str]:
        if not self.cursor:
            return self.argv
        return [self.journalctl, "-u", self.unit, "-o", "cat", "-f", f"--after-cursor={self.cursor}", "--no-pager"]

    def follow(self) -> None:
        proc = subprocess.Popen(self._argv(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        stopper = threading.Thread(target=lambda: (self.stop.wait(), proc.terminate()), daemon=True)
        stopper.start()
        try:
            for raw in proc.stdout:
                self._emit(raw)
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            proc.wait(5)
        if not self.stop.is_set():
            raise RuntimeError(f"journalctl exited with {proc.returncode}")


class FileFollower(LogFollower):
    """A tail of the file from where it ended when :meth:`start` returned (decided there, not in the thread:
    lines written right after start are never skipped, however late the thread gets the CPU)."""

    def __init__(self, path: str | Path, sink: Callable[[str], object], stop: threading.Event,
                 poll: float = 0.5, from_start: bool = False) -> None:
        super().__init__(sink, stop)
        self.path = Path(path)
        self.poll = poll
        self.from_start = from_start
        self._resume: tuple[int, int] | None = None  # (inode, offset) seen at start()

    def describe(self) -> str:
        return f"file:{self.path}"

    def start(self) -> None:
        if not self.from_start:
            try:
                st = os.stat(self.path)
                self._resume = (st.st_ino, st.st_size)
            except FileNotFoundError:
                self.from_start = True  # the file appears later: read all of it
        super().start()

    def follow(self) -> None:
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            self.from_start = True  # the file appears later: read all of it
            raise
        with fh:
            ino = os.fstat(fh.fileno()).st_ino
            if not self.from_start and self._resume is not None and self._resume[0] == ino:
                fh.seek(self._resume[1])  # the file as it was at start(); a new file is read from its start
            self.from_start = True  # after a rotation, read the new file from its start
            pending = b""
            while not self.stop.is_set():
                chunk = fh.read(65536)
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for raw in lines:
                        self._emit(raw)
                    if len(pending) > 4 * MAX_LINE:  # a runaway line without newline
                        pending = b""
                    continue
                try:
                    st = os.stat(self.path)
                except FileNotFoundError:
                    self.stop.wait(self.poll)
                    continue
                if st.st_ino != ino or st.st_size < fh.tell():
                    return  # rotated or truncated: reopen
                self.stop.wait(self.poll)
