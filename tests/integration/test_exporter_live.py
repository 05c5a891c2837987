"""The exporter against real llama-servers (SmolLM2 drafting for itself), in process and as `specops exporter`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specops.exporter.app import Exporter
from specops.exporter.config import ExporterConfig
from specops.exporter.logfollow import FileFollower
from specops.exporter.logline import LogAcceptance
from specops.exporter.state import Snapshot
from specops.profile import ServerProfile
from specops.server import ServerProcess, free_port

pytestmark = pytest.mark.integration

PROMPTS = [
    "Write the numbers from one to twenty:",
    "List the days of the week:",
    "The alphabet in capital letters is",
]


def wait_for(pred: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def exporter_for() -> Iterator[Callable[..., Exporter]]:
    started: list[Exporter] = []

    def _make(server: ServerProcess | str, serve: bool = False, **kw: object) -> Exporter:
        url = server if isinstance(server, str) else server.base_url
        cfg = ExporterConfig(server_url=url, listen_port=free_port(), interval=0.5, nvidia_smi="off", **kw)  # type: ignore[arg-type]
        exp = Exporter(cfg)
        exp.start(serve=serve)
        started.append(exp)
        return exp

    yield _make
    for exp in started:
        exp.shutdown()


def fresh(exp: Exporter, pred: Callable[[Snapshot], bool], timeout: float = 60.0) -> Snapshot:
    wait_for(lambda: pred(exp.scraper.snapshot), timeout, "exporter snapshot")
    return exp.scraper.snapshot


def test_speculative_server_end_to_end(start_server, smollm, llama_build, exporter_for):
    server = start_server(draft_model=str(smollm), draft_n_max=4)
    acceptance_from_log = LogAcceptance()
    stop = threading.Event()
    follower = FileFollower(server.log_path, acceptance_from_log.feed, stop, poll=0.1, from_start=True)
    follower.start()
    exp = exporter_for(server, serve=True)
    try:
        snap = fresh(exp, lambda s: s.up and s.process is not None)
        assert snap.process.pid == server.pid  # found by the listening port
        for prompt in PROMPTS:
            server.client.completion(prompt, n_predict=32, cache_prompt=False)
        # the exporter catches up with the last request, and the log lines agree with the counters
        # (the log is the fallback for builds without spec counters: exact on accepted/drafted tokens)
        wait_for(lambda: acceptance_from_log.snapshot().lines >= len(PROMPTS), 60, "log lines")
        log_c = acceptance_from_log.snapshot()
        snap = fresh(exp, lambda s: s.metrics is not None and s.window.acceptance_ratio is not None and
                     s.metrics.counters.get("llamacpp_spec_accepted_tokens_total") == log_c.accepted)
        counters = snap.metrics.counters
        assert log_c.generated == counters["llamacpp_spec_draft_tokens_total"]
        assert abs(log_c.drafts - counters["llamacpp_spec_drafts_total"]) <= max(2, 0.05 * log_c.drafts)
        assert snap.spec_source == "metrics" and snap.speculation_expected
        assert 0 < snap.window.acceptance_ratio <= 1
        assert snap.window.mean_acceptance_length >= 1
        assert snap.window.decode_tokens_per_second > 0
        assert snap.window.acceptance_by_position and 0 in snap.window.acceptance_by_position
        assert snap.slots.total == 1 and snap.slots.speculative == 1
        assert snap.launch.draft_model == smollm.name and snap.launch.draft_n_max == "4"
        assert snap.backend == llama_build.info["backend"] and snap.props.build_commit

        text = httpx.get(f"http://127.0.0.1:{exp.cfg.listen_port}/metrics", timeout=10).text
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        info = fams["llamacpp_server_info"].samples[0].labels
        assert info["spec_type"] == "draft-simple" and info["draft_model"] == smollm.name
        assert info["backend"] == llama_build.info["backend"] and info["spec_source"] == "metrics"
        assert fams["llamacpp_process_resident_memory_bytes"].samples[0].value > 10e6
        proc = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        stop.set()


def test_baseline_server_is_not_expected_to_speculate(start_server, exporter_for):
    server = start_server(spec_type="none")
    exp = exporter_for(server)
    server.client.completion(PROMPTS[0], n_predict=16, cache_prompt=False)
    snap = fresh(exp, lambda s: s.up and s.metrics.counters.get("llamacpp_tokens_predicted_total", 0) > 0)
    assert not snap.speculation_expected and snap.slots.speculative == 0
    assert snap.metrics.counters["llamacpp_spec_drafts_total"] == 0
    assert snap.window.acceptance_ratio is None  # undefined, not 0 or NaN


def test_restart_on_the_same_port_is_counted_and_counters_reset(llama_build, smollm, tmp_path, exporter_for):
    port = free_port()
    profile = ServerProfile.from_dict({"model": str(smollm), "draft_model": str(smollm), "draft_n_max": 4,
                                       "ctx_size": 2048, "threads": 1})
    first = ServerProcess(llama_build.server, profile, llama_build.caps, tmp_path / "a.log", port=port)
    with first:
        exp = exporter_for(first)
        first.client.completion(PROMPTS[0], n_predict=32, cache_prompt=False)
        before = fresh(exp, lambda s: s.up and s.metrics.counters.get("llamacpp_spec_drafts_total", 0) > 0)
        old_pid = before.process.pid
    fresh(exp, lambda s: not s.up)
    second = ServerProcess(llama_build.server, profile, llama_build.caps, tmp_path / "b.log", port=port)
    with second:
        after = fresh(exp, lambda s: s.up and s.process is not None and s.process.pid != old_pid)
        assert after.restarts == 1
        assert after.metrics.counters["llamacpp_spec_drafts_total"] < before.metrics.counters[
            "llamacpp_spec_drafts_total"]
        # a pass whose counters reach one of the old server's levels again starts a new window (a jump back to an
        # old level is never differenced as traffic); each counter's level is forgotten once reached, so a few
        # more requests always give the window an interval: send them one at a time, each seen by a pass
        snap = after
        for i in range(8):
            done = snap.metrics.counters.get("llamacpp_tokens_predicted_total", 0) if snap.metrics else 0
            second.client.completion(PROMPTS[i % len(PROMPTS)], n_predict=32, cache_prompt=False)
            snap = fresh(exp, lambda s, done=done: s.metrics is not None and s.metrics.counters.get(
                "llamacpp_tokens_predicted_total", 0) > done)
            if snap.window.acceptance_ratio is not None:
                break
        assert snap.window.acceptance_ratio is not None, "no window after eight requests on the new server"
        assert 0 < snap.window.acceptance_ratio <= 1  # the window survived the reset without going negative


def test_cli_once_and_sigterm(start_server, smollm):
    server = start_server(draft_model=str(smollm), draft_n_max=4)
    server.client.completion(PROMPTS[2], n_predict=32, cache_prompt=False)
    cli = [sys.executable, "-m", "specops.cli", "exporter", "--server-url", server.base_url]
    once = subprocess.run([*cli, "--once"], capture_output=True, timeout=120)
    assert once.returncode == 0, once.stderr
    assert b"llamacpp_spec_draft_tokens_total" in once.stdout and b"llamacpp_up 1.0" in once.stdout
    check = subprocess.run(["promtool", "check", "metrics"], input=once.stdout, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr

    port = free_port()
    proc = subprocess.Popen([*cli, "--listen-port", str(port), "--interval", "1"], stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        def serving() -> bool:
            try:
                return b"llamacpp_up 1.0" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).content
            except httpx.HTTPError:
                return False

        wait_for(serving, 60, "the exporter to serve")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")


def test_unreachable_then_real_server(llama_build, smollm, tmp_path, exporter_for):
    """The exporter starts before llama-server (boot order) and picks it up without a restart."""
    port = free_port()
    exp = exporter_for(f"http://127.0.0.1:{port}")
    fresh(exp, lambda s: s.time > 0 and not s.up)
    profile = ServerProfile.from_dict({"model": str(smollm), "ctx_size": 2048, "threads": 1})
    with ServerProcess(llama_build.server, profile, llama_build.caps, tmp_path / "late.log", port=port):
        snap = fresh(exp, lambda s: s.up and s.healthy and s.props.build_commit != "")
        assert snap.restarts == 0


