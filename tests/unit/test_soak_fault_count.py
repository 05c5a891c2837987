"""``--fault-count N`` is a promise (issue 40): N faults run, late if need be, or the soak fails saying which
fault did not run and why. The suite's systemd soak (45 s, kill9,stop:3,restart from 5 s every 8 s, tail 0,
``--fault-count 3``) ran two faults on a loaded host and still passed: the references took long, the plan was
re-made over the time left after them, and the third slot no longer fitted."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specops.bench.tasks import Task
from specops.exporter.process import FixedPid
from specops.soak import report
from specops.soak.backoff import Backoff
from specops.soak.config import FaultPlan, FaultSpec, SoakConfig, SoakConfigError, Thresholds
from specops.soak.faults import Actions, Injector
from specops.soak.invariants import FAIL, PASS, SKIP, check_fault_count
from specops.soak.runner import SoakRunner

# the suite's systemd soak, as test_soak_systemd.py runs it
SYSTEMD_PLAN = FaultPlan((FaultSpec("kill9"), FaultSpec("stop", 3.0), FaultSpec("restart")), first=5, interval=8,
                         tail=0, limit=3)


class VirtualTime:
    """The soak's clock, moved on only by the injector's waits: a run of minutes takes microseconds, and the
    same every time."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> bool:
        self.t += seconds
        return False


class Recorded(Actions):
    """No signals: each action is written down with the soak time it happened at."""

    def __init__(self, clock: Any) -> None:
        super().__init__(unit="fake.service")
        self.clock = clock
        self.calls: list[tuple[str, float, int | None]] = []

    def kill9(self, pid: int) -> str:
        self.calls.append(("kill9", self.clock(), pid))
        return "killed"

    def stop(self, pid: int, pause: float, wait: Any) -> str:
        self.calls.append(("stop", self.clock(), pid))
        wait(pause)
        return "stopped"

    def restart(self) -> str:
        self.calls.append(("restart", self.clock(), None))
        return "restarted"


def run_plan(plan: FaultPlan, duration: float, offset: float, recovery: float = 1.0,
             pid_of: Any = lambda: 42) -> tuple[Injector, Recorded, VirtualTime]:
    """The injector alone, on virtual time, started ``offset`` seconds in (the references took that long);
    every fault recovers ``recovery`` seconds after its action ended."""
    vt = VirtualTime(offset)
    actions = Recorded(vt)
    inj = Injector(plan, duration, vt, pid_of=pid_of,
                   recovered=lambda e: e.action_end + recovery if vt.t >= e.action_end + recovery else None,
                   actions=actions, sleep=vt.sleep)
    inj.start(offset=offset)
    assert inj._thread is not None
    inj._thread.join(timeout=30)
    assert not inj._thread.is_alive(), "the plan did not finish on virtual time"
    return inj, actions, vt


# ---- the injector ---------------------------------------------------------------------------------
def test_promised_faults_keep_their_slots_when_the_references_took_long() -> None:
    """The plan starts at 30 s (slow references): slots 35, 43, 51 in a 45 s run. The old code planned over
    the 15 s left, kept 35 and 43 only, and the third fault never ran."""
    inj, actions, _vt = run_plan(SYSTEMD_PLAN, duration=45.0, offset=30.0)
    assert [s for s, _spec in inj.schedule] == [35, 43, 51]
    assert [kind for kind, _t, _pid in actions.calls] == ["kill9", "stop", "restart"]
    assert actions.calls[-1][1] >= 51 > 45  # ran late, past the duration
    assert inj.missed() == []
    c = check_fault_count(inj.promised, inj.snapshot(), inj.missed())
    assert (c.status, c.detail) == (PASS, "3 of 3 promised faults ran")


def test_without_a_count_a_slot_past_the_end_is_still_not_planned() -> None:
    inj, actions, _vt = run_plan(FaultPlan(SYSTEMD_PLAN.faults, first=5, interval=8, tail=0), 45.0, 30.0)
    assert [kind for kind, _t, _pid in actions.calls] == ["kill9", "stop"]
    assert inj.promised == 0 and inj.missed() == []
    assert check_fault_count(0, inj.snapshot(), []).status == SKIP


def test_a_fault_past_the_late_allowance_is_reported_with_why() -> None:
    """With a 1 s recovery timeout, late faults may start until 45 + 3 × 1 = 48 s: the third slot (51 s) is
    past it, so it does not run, and says so."""
    plan = FaultPlan(SYSTEMD_PLAN.faults, first=5, interval=8, tail=0, limit=3, recovery_timeout=1.0)
    inj, actions, _vt = run_plan(plan, duration=45.0, offset=30.0, recovery=0.5)
    assert [kind for kind, _t, _pid in actions.calls] == ["kill9", "stop"]
    missed = inj.missed()
    assert [(m.index, m.of, m.kind, m.scheduled) for m in missed] == [(3, 3, "restart", 51.0)]
    c = check_fault_count(inj.promised, inj.snapshot(), missed)
    assert c.status == FAIL
    assert c.detail == ("fault 3 of 3 (restart) did not run: it was due at 51.0s (the plan started at 30.0s, "
                        "after the references), too late: late faults may start until 48.0s: the 45s duration + "
                        "3 × the 1s recovery timeout")


def test_the_load_goes_on_for_a_promised_fault_until_the_late_deadline() -> None:
    """pending() keeps the load going past the duration while a promised fault has not run, but no longer
    than the late deadline (duration + N × recovery timeout)."""
    plan = FaultPlan((FaultSpec("kill9"),), first=50, interval=10, tail=0, limit=1, recovery_timeout=20)
    # the clock stays at 0: the injector's thread waits for the slot (at 80 s) until it is stopped
    inj = Injector(plan, 60.0, lambda: 0.0, pid_of=lambda: 42, recovered=lambda e: None,
                   actions=Recorded(lambda: 0.0))
    inj.start(offset=30.0)  # slot at 80 s, past the 60 s duration: it would run late
    try:
        assert inj.late_deadline == 80.0
        assert inj.pending(61.0) and inj.pending(80.0)
        assert not inj.pending(80.5)  # the late allowance is spent: the load ends
    finally:
        inj.stop("test over")
    assert inj._thread is not None and not inj._thread.is_alive()
    assert [m.describe() for m in inj.missed()] == ["fault 1 of 1 (kill9) did not run: test over"]


def test_a_promised_signal_fault_waits_for_the_server_pid_to_come_back() -> None:
    """After kill -9 at 1 s the service has no PID until systemd has restarted it (12 s); the next promised
    fault (stop, due at 3 s) waits for the new PID (at most the recovery timeout) instead of failing with
    'no server PID known'."""
    plan = FaultPlan((FaultSpec("kill9"), FaultSpec("stop", 1.0)), first=1, interval=2, tail=0, limit=2,
                     recovery_timeout=30)
    vt = VirtualTime(0.0)
    actions = Recorded(vt)
    inj = Injector(plan, 10.0, vt, pid_of=lambda: 42 if vt.t < 3 else (43 if vt.t >= 12 else None),
                   recovered=lambda e: e.action_end + 0.5 if vt.t >= e.action_end + 0.5 else None,
                   actions=actions, sleep=vt.sleep)
    inj.start()
    assert inj._thread is not None
    inj._thread.join(timeout=30)
    assert not inj._thread.is_alive()
    assert [(kind, pid) for kind, _t, pid in actions.calls] == [("kill9", 42), ("stop", 43)]
    stop = inj.snapshot()[1]
    assert stop.error is None and stop.t >= 12


# ---- configuration --------------------------------------------------------------------------------
def test_a_count_that_cannot_fit_in_the_duration_is_refused() -> None:
    SoakConfig(duration=45, unit="u", faults=SYSTEMD_PLAN)  # 5, 13, 21 s: fits
    with pytest.raises(SoakConfigError, match=r"--fault-count 4: fault 4 \(kill9\) would come at 29s, after the "
                                              r"25s duration less the 0s fault tail"):
        SoakConfig(duration=25, unit="u", faults=FaultPlan(SYSTEMD_PLAN.faults, first=5, interval=8, tail=0,
                                                           limit=4))
    assert SoakConfig(duration=None, max_requests=5, unit="u", faults=SYSTEMD_PLAN).faults.limit == 3


# ---- the whole runner -----------------------------------------------------------------------------
REPLY = {"choices": [{"message": {"content": "same text"}}],
         "timings": {"predicted_n": 8, "predicted_ms": 80.0}}


class SkewedRunner(SoakRunner):
    """A runner whose clock jumps ahead by ``skew`` seconds while the references are recorded: the
    references of a loaded host, without waiting for them."""

    def __init__(self, cfg: SoakConfig, reference_seconds: float, on_reference: Any = None) -> None:
        self.skew = 0.0
        self.calls = 0
        self.lock = threading.Lock()
        self.latency = threading.Event()  # never set: each load request takes 10 ms, like a fast server
        super().__init__(cfg, pid_source=FixedPid(os.getpid()), actions=Recorded(self.clock),
                         client_factory=self._factory)
        self.reference_seconds = reference_seconds
        self.on_reference = on_reference

    def clock(self) -> float:
        return time.monotonic() - self._t0 + self.skew

    def _factory(self, index: int) -> Any:
        def send(task: Task) -> Any:
            if index == -1:
                self.skew += self.reference_seconds
                if self.on_reference:
                    self.on_reference(self)
            else:
                self.latency.wait(0.01)
            return REPLY

        return send


def config(plan: FaultPlan, duration: float) -> SoakConfig:
    return SoakConfig(url="http://fake", duration=duration, concurrency=1, references=1, reference_interval=600,
                      unit="fake.service", sample_interval=60.0, bucket_seconds=1.0, faults=plan,
                      backoff=Backoff(initial=0.01, max_delay=0.02, jitter=0),
                      thresholds=Thresholds(min_tps_ratio=0.0), run_id="fault-count")


def test_the_runner_keeps_the_promise_when_the_references_took_long(tmp_path: Path) -> None:
    """The systemd soak's shape at a tenth of its times: 4.5 s, faults from 0.5 s every 0.8 s, the references
    take 3 s. The old runner ran kill9 and stop and passed; the load now goes on until the restart has run."""
    faults = (FaultSpec("kill9"), FaultSpec("stop", 0.2), FaultSpec("restart"))
    plan = FaultPlan(faults, first=0.5, interval=0.8, tail=0, limit=3, recovery_timeout=30)
    runner = SkewedRunner(config(plan, 4.5), reference_seconds=3.0)
    result = runner.run()
    assert [f.kind for f in result.faults] == ["kill9", "stop", "restart"], result.to_dict()["failures"]
    assert all(f.error is None and f.recovered_at is not None for f in result.faults)
    assert result.faults[-1].t > 4.5  # late, past the duration
    assert result.ok, result.to_dict()["failures"]
    checks = {c.name: c for c in result.checks}
    assert (checks["fault_count"].status, checks["fault_count"].detail) == (PASS, "3 of 3 promised faults ran")
    assert result.to_dict()["faults_missed"] == []
    assert any("after the bound" in n for n in result.notes)


def test_a_shortfall_fails_the_soak_with_which_fault_and_why(tmp_path: Path) -> None:
    """Stopped (SIGTERM) while recording the references: none of the two promised faults ran. The old runner
    said PASS ('no faults injected' was a skip)."""
    plan = FaultPlan((FaultSpec("kill9"), FaultSpec("stop", 1.0)), first=0.5, interval=0.5, tail=0, limit=2)
    runner = SkewedRunner(config(plan, 4.5), reference_seconds=0.0, on_reference=lambda r: r.request_stop())
    result = runner.run()
    data = result.to_dict()
    assert result.faults == [] and data["verdict"] == "fail"
    first = data["failures"][0]
    assert first.startswith("fault_count: fault 1 of 2 (kill9) did not run: the soak was stopped on request "
                            "(SIGTERM) at "), data["failures"]
    assert first.endswith("; 1 more after it did not run either")
    assert [(m["index"], m["kind"]) for m in data["faults_missed"]] == [(1, "kill9"), (2, "stop:1")]
    md = report.write(result, tmp_path)["md"].read_text()
    assert md.startswith("# Soak fault-count: FAIL")
    assert "- fault_count: fault 1 of 2 (kill9) did not run: the soak was stopped on request (SIGTERM)" in md
    assert "- fault 2 (stop:1, due at" in md
