"""A short, bounded soak against a real llama-server (SmolLM2 drafting for itself) with a SIGSTOP/SIGCONT
fault and a kill -9 fault. There is no systemd here, so the test supervises the server itself: when the
process dies it starts a new one on the same port (what ``Restart=on-failure`` does for the unit)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specops.exporter.process import PortPid
from specops.profile import ServerProfile
from specops.server import ServerProcess
from specops.soak import report
from specops.soak.backoff import Backoff
from specops.soak.config import FaultPlan, FaultSpec, SoakConfig, Thresholds
from specops.soak.runner import SoakRunner
from tests import lab

pytestmark = pytest.mark.integration


class Supervisor:
    """Restart the server on the same port whenever it exits (a tiny Restart=on-failure)."""

    def __init__(self, first: ServerProcess, make: Callable[[int], ServerProcess]) -> None:
        self.current = first
        self.make = make
        self.spawned: list[ServerProcess] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            proc = self.current.proc
            if proc is None or proc.poll() is None:
                continue
            nxt = self.make(len(self.spawned) + 1)
            self.spawned.append(nxt)
            self.current = nxt
            self.restarts += 1
            nxt.start()

    def __enter__(self) -> Supervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=200)
        for s in self.spawned:
            s.stop()


@pytest.fixture
def supervised(start_server: Callable[..., ServerProcess], llama_build: lab.LlamaBuild, smollm: Path,
               tmp_path: Path) -> Iterator[Supervisor]:
    first = start_server(draft_model=str(smollm), threads=1)
    profile: ServerProfile = first.profile

    def make(n: int) -> ServerProcess:
        return ServerProcess(llama_build.server, profile, llama_build.caps,
                             log_path=tmp_path / f"llama-server-restart-{n}.log", port=profile.port)

    with Supervisor(first, make) as sup:
        yield sup


def test_short_soak_with_stop_and_kill_faults(supervised: Supervisor, tmp_path: Path) -> None:
    server = supervised.current
    cfg = SoakConfig(
        url=server.base_url, duration=30.0, concurrency=2, max_tokens=12, request_timeout=300.0,
        backoff=Backoff(initial=0.2, max_delay=2.0, give_up_after=600.0),
        references=2, reference_interval=4.0, sample_interval=0.5, bucket_seconds=10.0,
        faults=FaultPlan((FaultSpec("stop", 2.0), FaultSpec("kill9")), first=2.0, interval=6.0, tail=0.0,
                         recovery_timeout=300.0, limit=2),
        # judgements that depend on the speed of a shared machine are not asserted here
        thresholds=Thresholds(min_tps_ratio=0.0),
        run_id="itest",
    )
    runner = SoakRunner(cfg, pid_source=PortPid(server.profile.port), expect_speculation=True)
    result = runner.run()
    paths = report.write(result, tmp_path / "reports")

    s = result.summary
    assert s["lost"] == 0 and s["issued"] == s["recorded"], s
    assert s["failed"] == 0, s["failed_reasons"]
    assert s["succeeded"] + s["retried_then_succeeded"] == s["issued"]
    kinds = [f.kind for f in result.faults]
    assert kinds == ["stop", "kill9"], [f.to_dict() for f in result.faults]
    for f in result.faults:
        assert f.error is None, f.error
        assert f.recovered_at is not None and f.time_to_recovery is not None and f.time_to_recovery > 0
    kill = result.faults[1]
    assert supervised.restarts == 1
    assert kill.pid_before != supervised.current.pid
    # the requests cut off by kill -9 were retried and then succeeded
    assert s["retried_then_succeeded"] >= 1, s
    assert s["attempt_errors"], s
    checks = {c.name: c for c in result.checks}
    assert checks["restarts"].status == "pass", checks["restarts"].detail
    assert checks["fault_recovery"].status == "pass"
    assert checks["accounting"].status == "pass"
    assert checks["error_rate"].status == "pass", checks["error_rate"].detail
    assert checks["acceptance"].status != "fail", checks["acceptance"].detail
    assert result.ok, [c.detail for c in result.failures]

    assert set(paths) == {"md", "json", "png"}
    md = paths["md"].read_text()
    assert md.startswith("# Soak itest: PASS")
    assert "| kill9 |" in md and "| stop:2 |" in md
    data = json.loads(paths["json"].read_text())
    assert data["summary"]["lost"] == 0
    assert [f["kind"] for f in data["faults"]] == ["stop", "kill9"]
    assert all(f["time_to_recovery"] is not None for f in data["faults"])
    assert paths["png"].stat().st_size > 10_000
