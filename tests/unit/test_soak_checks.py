"""Soak faults (recovery rules, schedule, real signals on a child process), invariants and configuration."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specops.cli import build_parser
from specops.commands.soak import config_from_args, duration
from specops.soak.accounting import Attempt, RequestRecord
from specops.soak.alerts import load_rules, longest_run, parse_duration
from specops.soak.config import FaultPlan, FaultSpec, SoakConfig, SoakConfigError, Thresholds
from specops.soak.faults import Actions, FaultEvent, Injector, in_fault_window, recovery_time
from specops.soak.invariants import (
    FAIL,
    PASS,
    SKIP,
    check_acceptance,
    check_accounting,
    check_exporter,
    check_failed,
    check_faults,
    check_references,
    check_restarts,
    check_rss,
    check_throughput,
    check_unexplained_errors,
    nrestarts_increments,
    observed_restarts,
)
from specops.soak.reference import Drift
from specops.soak.sampler import ExporterSample, PidChange
from specops.soak.timeline import Bucket

REPO = Path(__file__).resolve().parents[2]


def fault(kind: str, t: float, end: float | None = None, **kw: object) -> FaultEvent:
    return FaultEvent(kind, kind, t, t, end if end is not None else t, 123, **kw)  # type: ignore[arg-type]


# ---- recovery -----------------------------------------------------------------------------------
def test_recovery_after_kill_needs_a_request_started_after_the_kill() -> None:
    f = fault("kill9", 10.0)
    attempts = [Attempt(5, 10.5, True),  # answered by the old process: not a recovery
                Attempt(11, 12, False, "connect", "refused"), Attempt(13, 20, True), Attempt(14, 25, True)]
    assert recovery_time(f, attempts) == 20
    assert recovery_time(f, attempts[:2]) is None


def test_recovery_after_stop_counts_requests_that_waited_through_it() -> None:
    f = fault("stop", 10.0, end=15.0)
    assert recovery_time(f, [Attempt(8, 14.9, True), Attempt(8, 15.2, True)]) == 15.2
    failed_injection = fault("stop", 10.0, end=15.0, error="no PID")
    assert recovery_time(failed_injection, [Attempt(11, 16, True)]) is None


def test_fault_windows() -> None:
    done = fault("kill9", 10.0)
    done.recovered_at = 20.0
    assert in_fault_window(15, [done]) and not in_fault_window(25, [done])
    assert in_fault_window(21, [done], grace=2.0)
    assert in_fault_window(1e9, [fault("kill9", 50.0)])  # never recovered: covers the rest of the run


def test_fault_spec_parse_and_plan_schedule() -> None:
    assert FaultSpec.parse("stop:7.5") == FaultSpec("stop", 7.5)
    assert FaultSpec.parse("stop") == FaultSpec("stop", 5.0)
    assert FaultSpec.parse("kill9").label() == "kill9"
    for bad in ("kill", "restart:3", "stop:x", ""):
        with pytest.raises(SoakConfigError):
            FaultSpec.parse(bad)
    plan = FaultPlan((FaultSpec("kill9"), FaultSpec("stop", 2)), first=60, interval=300, tail=30)
    assert [(t, f.kind) for t, f in plan.schedule(1200)] == [(60, "kill9"), (360, "stop"), (660, "kill9"),
                                                            (960, "stop")]
    assert plan.schedule(80) == []
    limited = FaultPlan(plan.faults, first=60, interval=300, tail=30, limit=1)
    assert [f.kind for _t, f in limited.schedule(1200)] == ["kill9"]
    assert FaultPlan().schedule(10_000) == []


class RecordingActions(Actions):
    def __init__(self) -> None:
        super().__init__(unit=None)
        self.calls: list[tuple[str, int | None]] = []

    def kill9(self, pid: int) -> str:
        self.calls.append(("kill9", pid))
        return "killed"

    def stop(self, pid: int, pause: float, wait) -> str:  # type: ignore[no-untyped-def]
        self.calls.append(("stop", pid))
        return "stopped"


def test_injector_offsets_the_plan_and_records_failures() -> None:
    now = [100.0]
    inj = Injector(FaultPlan((FaultSpec("stop", 1), FaultSpec("kill9")), first=5, interval=10, tail=0),
                   duration=130.0, clock=lambda: now[0], pid_of=lambda: 42, recovered=lambda e: None,
                   actions=RecordingActions())
    inj.schedule = []
    inj.start(offset=100.0)
    inj.stop()
    assert [(t, f.kind) for t, f in inj.schedule] == [(105, "stop"), (115, "kill9"), (125, "stop")]
    ev = inj.inject(105.0, FaultSpec("kill9"))
    assert ev.error is None and ev.detail == "killed" and ev.pid_before == 42
    no_pid = Injector(FaultPlan(), 10.0, lambda: 0.0, lambda: None, lambda e: None, RecordingActions())
    assert no_pid.inject(0.0, FaultSpec("kill9")).error == "RuntimeError: no server PID known: nothing to signal"
    assert no_pid.inject(0.0, FaultSpec("restart")).error == "RuntimeError: restart needs a unit"


def test_real_stop_and_cont_and_kill_on_a_child_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = psutil.Process(child.pid)
        seen: list[str] = []
        Actions().stop(child.pid, 0.2, lambda s: (time.sleep(s), seen.append(proc.status())))
        assert seen == [psutil.STATUS_STOPPED]
        assert proc.status() != psutil.STATUS_STOPPED
        Actions().kill9(child.pid)
        assert child.wait(10) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_restart_action_reports_systemctl_failure(tmp_path: Path) -> None:
    fake = tmp_path / "systemctl"
    fake.write_text("#!/bin/sh\necho \"Unit $3 not found.\" >&2\nexit 5\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="rc=5 Unit llama-server-speculative not found"):
        Actions(unit="llama-server-speculative", systemctl=str(fake)).restart()


# ---- invariants ---------------------------------------------------------------------------------
def rec(seq: int, attempts: list[Attempt], **kw: object) -> RequestRecord:
    r = RequestRecord(seq, "load", f"t{seq}", attempts, **kw)  # type: ignore[arg-type]
    r.finish()
    return r


def test_accounting_and_failed_requests() -> None:
    assert check_accounting(5, []).status == PASS
    c = check_accounting(5, [3, 4])
    assert c.status == FAIL and "2 of 5 requests lost" in c.detail
    ok = rec(0, [Attempt(0, 1, True)])
    bad = rec(1, [Attempt(2, 3, False, "http_4xx", "HTTP 400")])
    assert check_failed([ok], Thresholds()).status == PASS
    c = check_failed([ok, bad], Thresholds())
    assert c.status == FAIL and "#1" in c.detail and "http_4xx" in c.detail
    assert check_failed([ok, bad], Thresholds(max_failed_ratio=0.5)).status == PASS


def test_errors_inside_fault_windows_are_explained() -> None:
    f = fault("kill9", 10.0)
    f.recovered_at = 20.0
    inside = rec(0, [Attempt(9, 11, False, "connection_lost", "x"), Attempt(12, 20, True)])
    outside = rec(1, [Attempt(40, 41, False, "garbage", "xx"), Attempt(42, 43, True)])
    assert check_unexplained_errors([inside], [f], Thresholds()).status == PASS
    c = check_unexplained_errors([inside, outside], [f], Thresholds())
    assert c.status == FAIL and "at 41.0s: garbage" in c.detail


def test_references_check() -> None:
    th = Thresholds()
    assert check_references(0, 0, [], 0, th).status == SKIP
    assert check_references(3, 2, [], 0, th).status == FAIL
    assert check_references(3, 3, [], 0, th).status == SKIP
    assert check_references(3, 3, [], 9, th).status == PASS
    d = Drift("code-01", 120.0, 17, 42, "def f(x):", "def f(y):")
    c = check_references(3, 3, [d], 9, th)
    assert c.status == FAIL and "diverges at char 42" in c.detail and "code-01" in c.detail


def buckets(tps: list[float], acc: list[float | None], faults: set[int] | None = None) -> list[Bucket]:
    out = []
    for i, (v, a) in enumerate(zip(tps, acc, strict=True)):
        draft = 100 if a is not None else 0
        out.append(Bucket(i, i * 60.0, requests_ok=5, predicted_n=int(v * 10), predicted_ms=10_000.0,
                          draft_n=draft, draft_accepted=int(draft * (a or 0)),
                          faults=1 if i in (faults or set()) else 0))
    return out


def test_throughput_compares_early_and_late_steady_minutes() -> None:
    th = Thresholds(min_tps_ratio=0.5)
    assert check_throughput(buckets([10, 10, 10], [None] * 3), th).status == SKIP
    assert check_throughput(buckets([10] * 6, [None] * 6), th).status == PASS
    c = check_throughput(buckets([10, 10, 10, 4, 4, 4], [None] * 6), th)
    assert c.status == FAIL and "×0.40" in c.detail
    # a fault's minute is not steady: the slow minute 3 is ignored
    assert check_throughput(buckets([10, 10, 10, 1, 10, 10, 10], [None] * 7, {3}), th).status == PASS


def test_acceptance_trend_and_inactive_speculation() -> None:
    th = Thresholds(max_acceptance_drop=0.15)
    assert check_acceptance(buckets([10] * 6, [None] * 6), th, expect_speculation=False).status == SKIP
    c = check_acceptance(buckets([10] * 6, [None] * 6), th, expect_speculation=True)
    assert c.status == FAIL and "no request reported draft tokens" in c.detail
    assert check_acceptance(buckets([10] * 6, [0.7] * 6), th, True).status == PASS
    c = check_acceptance(buckets([10] * 6, [0.8, 0.8, 0.8, 0.5, 0.5, 0.5]), th, True)
    assert c.status == FAIL and "drop +0.300" in c.detail


def test_rss_check() -> None:
    th = Thresholds(max_rss_mb_per_hour=100, min_rss_span=600)
    seg = {"pid": 7, "first_mb": 500.0, "last_mb": 560.0, "span_s": 1800.0, "slope_mb_per_hour": 120.0}
    assert check_rss({"judged": seg}, False, th).status == SKIP
    assert check_rss({"judged": None}, True, th).status == SKIP
    c = check_rss({"judged": seg}, True, th)
    assert c.status == FAIL and "+120.0 MB/h" in c.detail
    assert check_rss({"judged": {**seg, "slope_mb_per_hour": 3.0}}, True, th).status == PASS
    assert check_rss({"judged": {**seg, "span_s": 100.0}}, True, th).status == SKIP


def test_restarts_expected_from_faults_and_unexpected_ones() -> None:
    changes = [PidChange(0, None, 10), PidChange(30, 10, None), PidChange(35, None, 11), PidChange(90, 11, 12)]
    assert observed_restarts(changes) == 2
    kill = fault("kill9", 30.0)
    c = check_restarts(changes, [], [kill], True)
    assert c.status == FAIL and c.detail.startswith("1 unexpected restart")
    assert check_restarts(changes, [], [kill, fault("restart", 89.0)], True).status == PASS
    c = check_restarts(changes[:3], [(0, 4), (40, 6)], [kill], True)
    assert c.status == FAIL and "1 time(s) more than the kill faults explain" in c.detail
    assert check_restarts(changes[:3], [(0, 4), (40, 5)], [kill], True).status == PASS
    assert check_restarts([], [], [], False).status == SKIP
    # `systemctl restart` resets NRestarts: 0 → 1 (kill -9) → 0 (manual restart) is one automatic restart
    assert nrestarts_increments([(0, 0), (50, 1), (115, 0)]) == 1
    assert nrestarts_increments([(0, 3), (50, 4), (60, 0), (90, 1)]) == 2
    assert check_restarts(changes, [(0, 0), (50, 1), (115, 0)], [kill, fault("restart", 89.0)], True).status == PASS


def test_fault_recovery_check() -> None:
    assert check_faults([]).status == SKIP
    ok = fault("stop", 10.0, end=12.0)
    ok.recovered_at = 14.0
    assert check_faults([ok]).status == PASS
    assert check_faults([ok, fault("kill9", 40.0)]).status == FAIL
    c = check_faults([fault("restart", 5.0, error="RuntimeError: rc=5")])
    assert c.status == FAIL and "could not be injected" in c.detail


def test_exporter_check_tolerates_one_blip() -> None:
    th = Thresholds(max_exporter_consecutive_failures=1)
    up, down = ExporterSample(0, True), ExporterSample(5, False, "ConnectError: refused")
    assert check_exporter(None, th).status == SKIP
    assert check_exporter([], th).status == FAIL
    assert check_exporter([up, down, up, down, up], th).status == PASS
    c = check_exporter([up, down, down, up], th)
    assert c.status == FAIL and "2 in a row" in c.detail and "refused" in c.detail


# ---- alerts helpers -----------------------------------------------------------------------------
def test_durations_and_runs() -> None:
    assert parse_duration("2m") == 120 and parse_duration("1h30m") == 5400 and parse_duration(None) == 0
    with pytest.raises(ValueError):
        parse_duration("2 minutes")
    assert longest_run([0, 15, 30, 90, 105], 15) == 30
    assert longest_run([], 15) == 0


def test_repo_alert_rules_load() -> None:
    rules = {name: for_s for name, _expr, for_s in load_rules(REPO / "configs/prometheus/rules/specops-alerts.yml")}
    assert rules["LlamaServerDown"] == 120 and rules["LlamaServerRestartLoop"] == 0


# ---- configuration and command line -------------------------------------------------------------
def test_config_must_be_bounded_and_consistent() -> None:
    with pytest.raises(SoakConfigError, match="bounded"):
        SoakConfig(duration=None, max_requests=None)
    with pytest.raises(SoakConfigError, match="restart fault needs --unit"):
        SoakConfig(faults=FaultPlan((FaultSpec("restart"),)))
    assert SoakConfig(duration=None, max_requests=10).bound_seconds == SoakConfig().max_duration_cap
    with pytest.raises(SoakConfigError):
        SoakConfig(concurrency=0)


def test_command_line_builds_the_config() -> None:
    args = build_parser().parse_args([
        "soak", "--url", "http://127.0.0.1:9000", "--duration", "30m", "--concurrency", "2",
        "--faults", "kill9,stop:3,restart", "--unit", "llama-server-speculative", "--fault-first", "2m",
        "--fault-interval", "5m", "--exporter-url", "http://127.0.0.1:9840", "--bucket", "30",
    ])
    cfg = config_from_args(args)
    assert cfg.duration == 1800 and cfg.concurrency == 2 and cfg.unit == "llama-server-speculative"
    assert [f.label() for f in cfg.faults.faults] == ["kill9", "stop:3", "restart"]
    assert (cfg.faults.first, cfg.faults.interval, cfg.bucket_seconds) == (120, 300, 30)
    assert duration("90") == 90 and duration("1h") == 3600


def test_gate_and_pending_keep_load_and_faults_in_step() -> None:
    now = [50.0]
    recovered: list[float | None] = [None]
    inj = Injector(FaultPlan((FaultSpec("kill9"),), recovery_timeout=100), duration=60.0, clock=lambda: now[0],
                   pid_of=lambda: 42, recovered=lambda e: recovered[0], actions=RecordingActions())
    assert not inj.pending(now[0])
    inj.gate.busy = True
    assert inj.pending(now[0])  # being injected
    inj.gate.busy = False
    inj.inject(50.0, FaultSpec("kill9"))
    assert inj.pending(55.0)  # not recovered yet: the load must go on
    assert not inj.pending(151.0)  # ... but only until the recovery timeout
    recovered[0] = 58.0
    assert not inj.pending(59.0)
    inj.gate.load_done = True
    assert not inj.gate.begin_fault()  # no fault once the load has ended


def test_rss_check_on_anonymous_memory_with_a_prompt_cache_allowance() -> None:
    seg = {"pid": 7, "first_mb": 1000.0, "last_mb": 1210.0, "span_s": 1200.0, "slope_mb_per_hour": 630.0}
    anon = {"judged": seg, "series": "anon_bytes"}
    c = check_rss(anon, True, Thresholds(max_rss_mb_per_hour=100, rss_allowance_mb=1024))
    assert c.status == PASS and "anonymous memory" in c.detail and "within the 1024 MB allowance" in c.detail
    c = check_rss(anon, True, Thresholds(max_rss_mb_per_hour=100, rss_allowance_mb=128))
    assert c.status == FAIL and "growth 210 MB beyond the 128 MB allowance" in c.detail
    assert "RSS of PID 7" in check_rss({"judged": seg}, True, Thresholds(max_rss_mb_per_hour=100)).detail


def test_prompt_cache_bound_comes_from_the_server_command_line() -> None:
    from specops.exporter.process import prompt_cache_bound_mib

    assert prompt_cache_bound_mib(["llama-server", "-m", "t.gguf", "--cache-ram", "1024"]) == 1024
    assert prompt_cache_bound_mib(["llama-server", "-cram=0"]) == 0
    assert prompt_cache_bound_mib(["llama-server", "-m", "t.gguf"]) == 8192  # llama.cpp's default
    assert prompt_cache_bound_mib(["llama-server", "--cache-ram", "-1"]) == float("inf")


class _SteppingClock:
    """Every reading moves the soak's clock on by ``step`` seconds (a loaded host where time flies)."""

    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


@pytest.mark.parametrize("limit", [None, 3])
def test_a_fault_count_runs_every_planned_fault_even_when_recoveries_make_them_late(limit: int | None) -> None:
    """Slots at 10, 30, 50 s of a 60 s run; each recovery takes 25 s (a loaded host), so the third slot comes
    after the run's end. Without a count it is skipped (an overnight plan just moves on); with
    ``--fault-count 3`` it runs late and ``pending`` keeps the load going until it has."""
    clock = _SteppingClock(5.0)
    actions = RecordingActions()
    inj = Injector(FaultPlan((FaultSpec("kill9"),), first=10, interval=20, tail=0, recovery_timeout=100,
                             limit=limit),
                   duration=60.0, clock=clock, pid_of=lambda: 42,
                   recovered=lambda e: e.action_end + 25 if clock.t >= e.action_end + 25 else None,
                   actions=actions)
    inj._run()
    assert len(inj.schedule) == 3
    assert len(actions.calls) == (3 if limit else 2)
    assert inj.remaining() == (0 if limit else 1)
    if limit:
        assert inj.events[-1].scheduled == 50 and inj.events[-1].t > 60.0  # ran late, past the end
