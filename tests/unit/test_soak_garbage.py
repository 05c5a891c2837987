"""What a real llama-server cannot be made to do on demand: answer garbage. A fake in-process HTTP server
stands in for it here, and only here; the soak runs its real client, retry and report paths against it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specops.soak import report
from specops.soak.backoff import Backoff
from specops.soak.config import SoakConfig
from specops.soak.runner import SoakRunner

GOOD = {"choices": [{"message": {"content": "fine"}}],
        "timings": {"predicted_n": 8, "predicted_ms": 80.0, "draft_n": 6, "draft_n_accepted": 3}}


class Script:
    def __init__(self, answers: list[tuple[int, bytes]]) -> None:
        self.answers = answers
        self.served = 0
        self.lock = threading.Lock()

    def next(self) -> tuple[int, bytes]:
        with self.lock:
            answer = self.answers[min(self.served, len(self.answers) - 1)]
            self.served += 1
            return answer


@pytest.fixture
def fake_server() -> Iterator[tuple[str, Script]]:
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, body = script.next()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def soak(url: str, requests: int, max_attempts: int = 10) -> SoakConfig:
    return SoakConfig(url=url, duration=None, max_requests=requests, references=0, run_id="fake",
                      backoff=Backoff(initial=0.01, max_delay=0.02, jitter=0, max_attempts=max_attempts),
                      sample_interval=60.0)


def test_garbage_is_retried_and_accounted(fake_server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = fake_server
    script.answers = [(200, b"<html>not json"), (200, b'{"choices": []}'), (200, b'{"choices": [{"message": '
                      b'{"content": "x"}}]}'), (200, json.dumps(GOOD).encode())]
    result = SoakRunner(soak(url, 3), expect_speculation=True).run()
    s = result.summary
    assert (s["issued"], s["retried_then_succeeded"], s["succeeded"], s["failed"], s["lost"]) == (3, 1, 2, 0, 0)
    assert s["attempt_errors"] == {"garbage": 1, "bad_shape": 2}
    # no fault explains these errors: the error-rate invariant breaks, and the report says so first
    assert [c.name for c in result.failures] == ["error_rate"]
    paths = report.write(result, tmp_path)
    md = paths["md"].read_text()
    assert md.splitlines()[0] == "# Soak fake: FAIL"
    assert md.splitlines()[4].startswith("- error_rate: 3 failed attempts outside any fault window")
    data = json.loads(paths["json"].read_text())
    assert data["verdict"] == "fail" and data["summary"]["retried_then_succeeded"] == 1
    first = data["requests"][0]
    assert [a["error_kind"] for a in first["attempts"]] == ["garbage", "bad_shape", "bad_shape", None]


def test_persistent_garbage_fails_with_the_reason(fake_server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = fake_server
    script.answers = [(200, b"\x00\xffgarbage")]
    result = SoakRunner(soak(url, 2, max_attempts=3)).run()
    s = result.summary
    assert (s["issued"], s["failed"], s["lost"]) == (2, 2, 0)
    (reason, n), = s["failed_reasons"].items()
    assert n == 2 and reason.startswith("gave up after 3 attempts; last: garbage")
    names = [c.name for c in result.failures]
    assert names[:2] == ["failed_requests", "error_rate"]
    md = report.write(result, tmp_path)["md"].read_text()
    assert "2 × gave up after 3 attempts; last: garbage" in md


def test_server_errors_are_retried_but_client_errors_are_not(fake_server: tuple[str, Script]) -> None:
    url, script = fake_server
    script.answers = [(503, b'{"error": "loading"}'), (200, json.dumps(GOOD).encode()),
                      (400, b'{"error": "bad request"}')]
    result = SoakRunner(soak(url, 2)).run()
    outcomes = [(r.outcome, [a.error_kind for a in r.attempts]) for r in result.records]
    assert outcomes == [("retried_then_succeeded", ["http_5xx", None]), ("failed", ["http_4xx"])]
