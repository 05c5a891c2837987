"""Fault injection (kill -9, SIGSTOP/SIGCONT, systemctl restart) and time to recovery.

Recovery is the first successful request after the fault: one that ended after the fault's action
finished (after SIGCONT for a stop) and, for kill and restart, also started after the fault (an answer
from the old process does not count).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from specops.soak.accounting import Attempt
from specops.soak.config import FaultPlan, FaultSpec

log = logging.getLogger(__name__)


@dataclass
class FaultEvent:
    kind: str
    label: str
    scheduled: float
    t: float  # when the action started (seconds since the start of the soak)
    action_end: float  # when it finished (after SIGCONT for stop; after systemctl returned for restart)
    pid_before: int | None
    detail: str = ""
    error: str | None = None
    recovered_at: float | None = None

    @property
    def time_to_recovery(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.t

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        ttr = self.time_to_recovery
        d["time_to_recovery"] = None if ttr is None else round(ttr, 3)
        return d


def recovery_time(fault: FaultEvent, attempts: list[Attempt]) -> float | None:
    """When the first successful request after ``fault`` ended (seconds since start), or None."""
    if fault.error:
        return None
    ends = [a.end for a in attempts
            if a.ok and a.end > fault.action_end and (fault.kind == "stop" or a.start >= fault.t)]
    return min(ends) if ends else None


def in_fault_window(t: float, faults: list[FaultEvent], grace: float = 0.0) -> bool:
    """Whether ``t`` falls between a fault's start and its recovery (plus ``grace``).

    An unrecovered fault covers everything after it.
    """
    for f in faults:
        end = f.recovered_at if f.recovered_at is not None else float("inf")
        if f.t - grace <= t <= end + grace:
            return True
    return False


class Actions:
    """The real actions. Kept apart so the injector's scheduling is testable without signals."""

    def __init__(self, unit: str | None = None, systemctl: str = "systemctl", timeout: float = 180.0) -> None:
        self.unit = unit
        self.systemctl = systemctl
        self.timeout = timeout

    def kill9(self, pid: int) -> str:
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL to {pid}"

    def stop(self, pid: int, pause: float, wait: Callable[[float], object]) -> str:
        os.kill(pid, signal.SIGSTOP)
        try:
            wait(pause)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return f"SIGSTOP to {pid}, SIGCONT after {pause:g}s"

    def restart(self) -> str:
        if not self.unit:
            raise RuntimeError("restart needs a unit")
        argv = [self.systemctl, "restart", "--", self.unit]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: rc={out.returncode} {out.stderr.strip()[:200]}")
        return " ".join(argv)


@dataclass(frozen=True)
class MissedFault:
    """A promised fault (``--fault-count``) that did not run, and why."""

    index: int  # 1-based, in the plan's order
    of: int  # faults promised
    kind: str  # its label (stop:SECONDS for a stop)
    scheduled: float
    why: str

    def describe(self) -> str:
        return f"fault {self.index} of {self.of} ({self.kind}) did not run: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Gate:
    """Keeps the load and the faults in step at the end of a run: no fault once the load has ended, and the
    load does not end while a fault is being injected (the runner keeps sending until it has recovered)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.load_done = False
        self.ended_at: float | None = None  # when the load ended (set with load_done)
        self.busy = False

    def end_load(self, t: float) -> None:
        """Called with ``lock`` held."""
        if not self.load_done:
            self.load_done, self.ended_at = True, t

    def begin_fault(self) -> bool:
        with self.lock:
            if self.load_done:
                return False
            self.busy = True
            return True

    def end_fault(self) -> None:
        with self.lock:
            self.busy = False


class Injector:
    """Runs the plan in a thread: waits for each slot, for the previous fault's recovery, then acts.

    Without a fault count a slot that comes late (past the plan's end) is skipped: an overnight plan just
    moves on. With one (``plan.limit``) the N faults are a promise: the plan keeps N slots wherever the
    load started, a late one runs as soon as the previous fault has recovered, and :meth:`pending` keeps
    the load going past the duration for it, until ``late_deadline`` (the duration plus
    :meth:`FaultPlan.late_allowance`). A promised fault that still did not run is in :meth:`missed`, with
    why, and fails the soak."""

    def __init__(self, plan: FaultPlan, duration: float, clock: Callable[[], float],
                 pid_of: Callable[[], int | None], recovered: Callable[[FaultEvent], float | None],
                 actions: Actions | None = None, gate: Gate | None = None,
                 sleep: Callable[[float], object] | None = None) -> None:
        self.plan = plan
        self.gate = gate or Gate()
        self.duration = duration
        self.offset = 0.0
        self.schedule = self._plan(0.0)
        self.clock = clock
        self.pid_of = pid_of
        self.recovered = recovered
        self.actions = actions or Actions()
        self.events: list[FaultEvent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # waiting: interrupted by stop(); a test passes a sleep that moves its own clock on instead
        self._sleep = sleep or self._stop.wait
        self._stop_why: str | None = None
        self._why: str | None = None  # why the first promised fault not injected did not run
        self._thread: threading.Thread | None = None

    def _plan(self, offset: float) -> list[tuple[float, FaultSpec]]:
        """The slots, ``offset`` seconds into the soak. A fault count keeps all its slots, even those that the
        time taken before the load (recording the references) pushed past the end: they run late."""
        if self.exact:
            return [(offset + t, spec) for t, spec in self.plan.slots(self.plan.limit or 0)]
        return [(offset + t, spec) for t, spec in self.plan.schedule(self.duration - offset)]

    @property
    def late_deadline(self) -> float:
        """With a fault count: the last moment (seconds since the start of the soak) a promised fault may start,
        and until which the load goes on for it."""
        return self.duration + self.plan.late_allowance()

    def _allowance_text(self) -> str:
        return (f"late faults may start until {self.late_deadline:.1f}s: the {self.duration:g}s duration + "
                f"{self.plan.limit} × the {self.plan.recovery_timeout:g}s recovery timeout")

    def _wait_until(self, t: float) -> bool:
        while not self._stop.is_set():
            left = t - self.clock()
            if left <= 0:
                return True
            self._sleep(min(left, 0.2))
        return False

    def _wait_recovery(self, event: FaultEvent) -> None:
        deadline = event.action_end + self.plan.recovery_timeout
        while not self._stop.is_set() and self.clock() < deadline:
            if self.recovered(event) is not None:
                return
            self._sleep(0.2)

    def inject(self, scheduled: float, spec: FaultSpec) -> FaultEvent:
        pid = self.pid_of()
        t = self.clock()
        event = FaultEvent(spec.kind, spec.label(), scheduled, t, t, pid)
        try:
            if spec.kind == "restart":
                event.detail = self.actions.restart()
            elif pid is None:
                raise RuntimeError("no server PID known: nothing to signal")
            elif spec.kind == "kill9":
                event.detail = self.actions.kill9(pid)
            elif spec.kind == "stop":
                # SIGCONT is sent even if the soak is stopped meanwhile
                event.detail = self.actions.stop(pid, spec.pause, self._sleep)
            else:
                raise RuntimeError(f"unknown fault kind {spec.kind}")
        except Exception as exc:
            event.error = f"{type(exc).__name__}: {exc}"
            log.warning("fault %s failed: %s", spec.label(), event.error)
        event.action_end = self.clock()
        with self._lock:
            self.events.append(event)
        log.info("fault %s at %.1fs: %s", spec.label(), t, event.detail or event.error)
        return event

    @property
    def exact(self) -> bool:
        """A fault count was asked for (``--fault-count``): every planned fault runs, late if need be."""
        return self.plan.limit is not None

    def remaining(self) -> int:
        """Planned faults not injected yet."""
        return max(0, len(self.schedule) - len(self.snapshot()))

    def _wait_pid(self) -> None:
        """With a fault count, a signal fault waits (at most the recovery timeout) for a server PID to be
        known again, e.g. while the service is still coming back from the previous fault; where no PID was
        ever known (no way to find it) it is injected at once and fails with the reason."""
        if not any(e.pid_before is not None for e in self.snapshot()):
            return
        deadline = self.clock() + self.plan.recovery_timeout
        while not self._stop.is_set() and self.clock() < deadline and self.pid_of() is None:
            self._sleep(0.5)

    def _stopped_why(self, scheduled: float) -> str:
        if self._stop_why:
            return self._stop_why
        ended = self.gate.ended_at
        when = f"the load ended at {ended:.1f}s" if ended is not None else f"the soak stopped at {self.clock():.1f}s"
        return f"{when}, before it could start (due at {scheduled:.1f}s; {self._allowance_text()})"

    def _run(self) -> None:
        last_slot = self.duration - self.plan.tail
        for scheduled, spec in self.schedule:
            if self.exact and scheduled > self.late_deadline:
                self._why = (f"it was due at {scheduled:.1f}s (the plan started at {self.offset:.1f}s, after the "
                             f"references), too late: {self._allowance_text()}")
                return
            if not self._wait_until(scheduled):
                self._why = self._stopped_why(scheduled)
                return
            if self.exact and spec.kind != "restart":
                self._wait_pid()
            now = self.clock()
            # a late slot (the previous fault took long to recover, e.g. on a loaded machine) is skipped past
            # the end of the plan, unless a fault count was asked for: then the load goes on until it has run
            if now > last_slot and not self.exact:
                return
            if self.exact and now > self.late_deadline:
                self._why = (f"due at {scheduled:.1f}s, it could not start before {now:.1f}s (the previous fault's "
                             f"recovery or the server's PID took until then): {self._allowance_text()}")
                return
            if self._stop.is_set() or not self.gate.begin_fault():
                self._why = self._stopped_why(scheduled)
                return
            try:
                event = self.inject(scheduled, spec)
            finally:
                self.gate.end_fault()
            if not event.error:
                self._wait_recovery(event)

    @property
    def promised(self) -> int:
        """Faults promised (``--fault-count``); 0 without a count."""
        return len(self.schedule) if self.exact else 0

    def missed(self) -> list[MissedFault]:
        """Promised faults that did not run (the plan runs in order: those after the last one injected)."""
        if not self.exact:
            return []
        done = len(self.snapshot())
        n = len(self.schedule)
        out = []
        for i, (scheduled, spec) in enumerate(self.schedule[done:], done + 1):
            why = self._why or self._stopped_why(scheduled)
            if i > done + 1:
                why = f"not reached (fault {done + 1} did not run)"
            out.append(MissedFault(i, n, spec.label(), round(scheduled, 3), why))
        return out

    def pending(self, now: float) -> bool:
        """A fault is being injected, the last one has not recovered yet (within the recovery timeout), or
        (with a fault count) a planned fault has not run yet."""
        if self.gate.busy:
            return True
        if (self.exact and self.remaining() and now <= self.late_deadline and self._thread is not None
                and self._thread.is_alive()):
            return True
        events = self.snapshot()
        if not events or events[-1].error:
            return False
        last = events[-1]
        return now <= last.action_end + self.plan.recovery_timeout and self.recovered(last) is None

    def start(self, offset: float = 0.0) -> None:
        """Start the plan ``offset`` seconds into the soak (after the references were recorded):
        fault times count from there. Without a fault count the run's end still bounds them; with one, every
        promised slot is kept (see the class docstring)."""
        self.offset = offset
        self.schedule = self._plan(offset)
        if not self.schedule:
            return
        self._thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)
        self._thread.start()

    def stop(self, why: str | None = None) -> None:
        """Stop the plan; ``why`` (e.g. a SIGTERM) is what a promised fault that had not run yet reports."""
        if why and self._stop_why is None:
            self._stop_why = why
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=60)

    def snapshot(self) -> list[FaultEvent]:
        with self._lock:
            return list(self.events)
