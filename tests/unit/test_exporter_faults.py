"""Fault injection: a local HTTP server that misbehaves on purpose; the exporter must keep serving.

The misbehaving server is a stand-in for llama-server's HTTP surface (the real server is exercised by the
integration tests); it serves the real captures from tests/fixtures/llama-server-0c1e57098 unless told
to fail in a given way.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specops.exporter.app import Exporter
from specops.exporter.config import ExporterConfig
from specops.exporter.logfollow import FileFollower
from specops.exporter.state import Scraper
from specops.server import free_port
from tests.unit.standin_http import serve

CAP = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server-0c1e57098"


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0  # before the headers
    drip: float = 0.0  # between 1-byte chunks of the body
    chunked: bool = False
    content_type: str = "text/plain"


def default_routes() -> dict[str, Reply]:
    return {
        "/health": Reply(body=(CAP / "spec_health.json").read_bytes(), content_type="application/json"),
        "/metrics": Reply(body=(CAP / "spec_metrics_after_bench.txt").read_bytes()),
        "/slots": Reply(body=(CAP / "spec_slots.json").read_bytes(), content_type="application/json"),
        "/props": Reply(body=(CAP / "spec_props.json").read_bytes(), content_type="application/json"),
    }


class FaultServer:
    """A threaded HTTP server on 127.0.0.1 whose replies are set per path by the test."""

    def __init__(self) -> None:
        self.routes: dict[str, Reply | Callable[[], Reply]] = dict(default_routes())
        self.hits: dict[str, int] = {}
        self.connections: set[socket.socket] = set()  # open keep-alive connections, dropped by close()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                outer.connections.add(self.connection)

            def finish(self) -> None:
                outer.connections.discard(self.connection)
                super().finish()

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.hits[self.path] = outer.hits.get(self.path, 0) + 1
                route = outer.routes.get(self.path, Reply(404, b"not found"))
                r = route() if callable(route) else route  # a callable answers each request afresh
                if r.delay:
                    time.sleep(r.delay)
                try:
                    self.send_response(r.status)
                    self.send_header("Content-Type", r.content_type)
                    if r.chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                    else:
                        self.send_header("Content-Length", str(len(r.body)))
                    self.end_headers()
                    if r.chunked:
                        for i in range(0, len(r.body), 65536):
                            part = r.body[i:i + 65536]
                            self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    elif r.drip:
                        for b in r.body:
                            self.wfile.write(bytes([b]))
                            self.wfile.flush()
                            time.sleep(r.drip)
                    else:
                        self.wfile.write(r.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd, self.url, self.thread = serve(Handler)

    def close(self) -> None:
        """Gone as a killed server is: no listener, and the open keep-alive connections dropped too."""
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in list(self.connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    server = FaultServer()
    yield server
    server.close()


def test_a_client_resetting_its_kept_alive_connection_prints_nothing(fault_server, capsys):
    """The stand-in's handler thread, waiting for the next request on a kept-alive connection, gets
    ConnectionResetError when its client resets it: counted, not printed into whatever test runs then
    (tests/unit/standin_http.py)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(fault_server.url.rsplit(":", 1)[1]), timeout=10)
    conn.request("GET", "/health")
    reply = conn.getresponse()
    # the whole answer read: the handler has written its last byte and waits for the next request
    assert reply.status == 200 and reply.read() == default_routes()["/health"].body
    assert conn.sock is not None
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # its close sends a reset
    conn.close()
    deadline = time.monotonic() + 10
    while fault_server.httpd.hangups == 0:
        assert time.monotonic() < deadline, "the reset never reached the handler thread"
        time.sleep(0.01)
    assert capsys.readouterr().err == ""


def make_scraper(url: str, timeout: float = 0.5, **kw: object) -> Scraper:
    cfg = ExporterConfig(server_url=url, timeout=timeout, max_body_bytes=256 * 1024, pid_from_port=False,
                         nvidia_smi="off", **kw)  # type: ignore[arg-type]
    return Scraper(cfg)


def errors(scraper: Scraper) -> dict[tuple[str, str], int]:
    return {k: v for k, v in scraper.selfm.copy()[0].items() if v}


def test_healthy_capture_scrapes_clean(fault_server):
    # a healthy server answers every endpoint: the scraper may wait as long as a loaded machine needs (the whole suite
    # on 2 cores once took over 0.5 s for /health, and the capture read unhealthy)
    s = make_scraper(fault_server.url, timeout=10.0)
    snap = s.scrape_once()
    assert snap.up and snap.healthy and snap.spec_source == "metrics"
    assert snap.slots and snap.slots.speculative == 1
    assert snap.props.build_commit == "0c1e57098"
    assert errors(s) == {}


def test_at_most_one_metrics_get_per_pass_and_props_once(fault_server):
    s = make_scraper(fault_server.url)
    for _ in range(5):
        s.scrape_once()
    assert fault_server.hits["/metrics"] == 5 and fault_server.hits["/props"] == 1


def test_server_down_gives_up_0_and_logs_once(caplog):
    s = make_scraper(f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING, logger="specops.exporter"):
        for _ in range(4):
            snap = s.scrape_once()
    assert not snap.up and not snap.healthy and snap.metrics is None
    assert errors(s)[("metrics", "connect")] == 4 and errors(s)[("health", "connect")] == 4
    metrics_warnings = [r for r in caplog.records if r.getMessage().startswith("metrics:")]
    assert len(metrics_warnings) == 1


def test_recovery_is_logged_once(fault_server, caplog):
    s = make_scraper(fault_server.url)
    fault_server.routes["/metrics"] = Reply(500, b"boom")
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        for _ in range(3):
            assert not s.scrape_once().up
        fault_server.routes["/metrics"] = default_routes()["/metrics"]
        for _ in range(3):
            assert s.scrape_once().up
    messages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics:")]
    assert len(messages) == 2 and "ok again" in messages[1]
    assert errors(s)[("metrics", "http_5xx")] == 3


@pytest.mark.parametrize(
    ("path", "reply", "kind", "up"),
    [
        ("/metrics", Reply(503, b"loading"), "http_5xx", False),
        ("/metrics", Reply(501, b"metrics disabled"), "http_5xx", False),
        ("/metrics", Reply(404), "http_4xx", False),
        ("/metrics", Reply(body=b"\x00\xff garbage {{{ not prometheus"), "shape", False),
        ("/metrics", Reply(body=b"llamacpp:tokens_predicted_total 1\n}}}garbage\n"), "parse", True),
        ("/metrics", Reply(body=b"llamacpp:tokens_predicted_total NaN\nllamacpp:requests_processing 0\n"),
         "invalid_value", True),
        ("/metrics", Reply(body=b"x" * (1024 * 1024)), "too_large", False),
        ("/metrics", Reply(body=b"# " + b"x" * (1024 * 1024), chunked=True), "too_large", False),
        ("/metrics", Reply(delay=1.5), "timeout", False),
        ("/metrics", Reply(body=b"llamacpp:requests_processing 0\n" * 20, drip=0.05), "timeout", False),
        ("/slots", Reply(body=b"[{\"id\": 0,"), "invalid_json", True),
        ("/slots", Reply(body=b"{\"slots\": []}"), "shape", True),
        ("/slots", Reply(body=b"[1, 2, 3]"), "shape", True),
        ("/slots", Reply(500), "http_5xx", True),
        ("/health", Reply(body=b"[]"), "shape", True),
        ("/health", Reply(body=b"<html>"), "invalid_json", True),
        ("/props", Reply(body=b"null"), "shape", True),
        ("/props", Reply(body=b"{" * 100000), "invalid_json", True),
    ],
)
def test_fault_becomes_an_error_kind(fault_server, path, reply, kind, up):
    fault_server.routes[path] = reply
    s = make_scraper(fault_server.url)
    snap = s.scrape_once()
    endpoint = path.strip("/")
    assert errors(s).get((endpoint, kind), 0) == 1, errors(s)
    assert snap.up is up


def test_health_503_while_loading_is_not_an_error(fault_server):
    fault_server.routes["/health"] = Reply(503, b'{"error":{"code":503,"message":"Loading model"}}')
    fault_server.routes["/metrics"] = Reply(503, b"loading")
    s = make_scraper(fault_server.url)
    snap = s.scrape_once()
    assert not snap.healthy and not snap.up
    assert ("health", "http_5xx") not in errors(s)


def test_restart_without_pid_is_seen_as_a_counter_reset(fault_server):
    s = make_scraper(fault_server.url)
    s.scrape_once()
    fault_server.routes["/metrics"] = Reply(body=(CAP / "base_metrics.txt").read_bytes())  # smaller counters
    snap = s.scrape_once()
    assert snap.restarts == 1 and fault_server.hits["/props"] == 2


def test_log_source_fills_in_for_old_builds(fault_server, tmp_path):
    old = "\n".join(line for line in (CAP / "base_metrics.txt").read_text().splitlines()
                    if "spec_decode" not in line) + "\n"  # a complete body ends with a newline
    fault_server.routes["/metrics"] = Reply(body=old.encode())
    log_file = tmp_path / "llama-server.log"
    log_file.write_text("")
    cfg = ExporterConfig(server_url=fault_server.url, timeout=0.5, pid_from_port=False, nvidia_smi="off",
                         log_file=str(log_file), listen_port=free_port())
    exp = Exporter(cfg)
    exp.start(serve=False)
    try:
        with log_file.open("a") as fh:
            fh.write((CAP / "server_log_excerpt.txt").read_text())
        deadline = time.monotonic() + 30
        while exp.log_acceptance and exp.log_acceptance.snapshot().lines < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        snap = exp.scraper.scrape_once()
        assert snap.spec_source == "log"
        assert snap.spec_counters()["llamacpp_spec_accepted_tokens_total"] == 275
        text = exp.exposition().decode()
        assert 'spec_source="log"' in text and "llamacpp_spec_drafts_total 36.0" in text
    finally:
        exp.shutdown()


def doubled_counters() -> str:
    """The spec capture with every *_total value doubled: traffic happened between two scrapes."""
    out = []
    for line in (CAP / "spec_metrics_after_bench.txt").read_text().splitlines():
        name, _, value = line.rpartition(" ")
        out.append(f"{name} {float(value) * 2}" if "_total" in name and not line.startswith("#") else line)
    return "\n".join(out) + "\n"


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_exporter_keeps_serving_through_faults(fault_server):
    port = free_port()
    cfg = ExporterConfig(server_url=fault_server.url, listen_port=port, interval=0.2, timeout=0.3,
                         pid_from_port=False, nvidia_smi="off")
    exp = Exporter(cfg)
    exp.start()
    url = f"http://127.0.0.1:{port}/metrics"
    seen_up: list[float] = []

    def scrape() -> dict[str, list]:
        fams = _families(httpx.get(url, timeout=5).text)
        seen_up.append(fams["llamacpp_up"][0].value)
        return fams

    def wait_for(pred: Callable[[dict[str, list]], bool]) -> dict[str, list]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            fams = scrape()
            if pred(fams):
                return fams
            time.sleep(0.1)
        raise AssertionError("condition not reached")

    try:
        wait_for(lambda f: f["llamacpp_up"][0].value == 1)
        for reply in (Reply(500), Reply(body=b"\xff\xfe"), Reply(delay=1.0), Reply(body=b"x" * (8 << 20))):
            fault_server.routes["/metrics"] = reply
            fams = wait_for(lambda f: f["llamacpp_up"][0].value == 0)
            assert "llamacpp_tokens_predicted" not in fams  # no stale server counters while down
        fault_server.close()  # the server goes away entirely
        wait_for(lambda f: f["llamacpp_up"][0].value == 0)
        assert exp._thread.is_alive()
    finally:
        exp.shutdown()


def test_exposition_passes_promtool_check_metrics(fault_server):
    # our own PID stands in for llama-server's so the process series are in the exposition too
    exp = Exporter(ExporterConfig(server_url=fault_server.url, pid=os.getpid(), nvidia_smi="off"))
    exp.scraper.scrape_once()
    fault_server.routes["/metrics"] = Reply(body=doubled_counters().encode())
    exp.scraper.scrape_once()
    text = exp.exposition()
    for name in ("llamacpp_process_resident_memory_bytes", "llamacpp_spec_acceptance_ratio",
                 "llamacpp_spec_accepted_tokens_by_position_total",
                 "specops_exporter_scrape_duration_seconds"):
        assert name.encode() in text
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()


class SlowStartFollower(FileFollower):
    """A follower whose thread gets the CPU late, as on a loaded machine (the race the suite once lost)."""

    def follow(self) -> None:
        if not getattr(self, "_slept", False):
            self._slept = True
            time.sleep(0.5)
        super().follow()


def test_file_follower_reads_lines_written_right_after_start(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("old line, before start\n")
    seen: list[str] = []
    stop = threading.Event()
    follower = SlowStartFollower(path, seen.append, stop, poll=0.05)
    follower.start()
    with path.open("a") as fh:  # before the thread has even opened the file
        fh.write("first after start\nsecond after start\n")
    try:
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen == ["first after start", "second after start"]
    finally:
        stop.set()
