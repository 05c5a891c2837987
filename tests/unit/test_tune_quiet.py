"""The tune beside a live service (specops.tune.quiet): idle waits and the watch over /slots, against a stand-in that
answers /slots like llama-server (busy or idle on demand: a client's request cannot be timed to a poll for real)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specops.client import LlamaServerClient
from specops.tune import quiet


class Slots:
    busy = 0
    key = ""


def _handler(state: type[Slots]) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if state.key and self.headers.get("Authorization") != f"Bearer {state.key}":
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps([{"id": i, "is_processing": i < state.busy} for i in range(2)]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return H


@pytest.fixture
def server() -> Iterator[tuple[str, type[Slots]]]:
    state = type("S", (Slots,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    httpd.shutdown()


def test_busy_slots_counts_and_none_without_an_answer(server):
    url, state = server
    assert quiet.busy_slots(LlamaServerClient(url)) == 0
    state.busy = 2
    assert quiet.busy_slots(LlamaServerClient(url)) == 2
    state.key = "k1"
    assert quiet.busy_slots(LlamaServerClient(url)) is None  # refused without the key: unknown, not idle
    assert quiet.busy_slots(LlamaServerClient(url, api_key="k1")) == 2
    assert quiet.busy_slots(LlamaServerClient("http://127.0.0.1:9")) is None


def test_wait_idle_is_bounded(server):
    url, state = server
    state.busy = 1
    idle, waited = quiet.wait_idle(LlamaServerClient(url), 0.6, interval=0.1)
    assert not idle and waited >= 0.6
    threading.Timer(0.3, lambda: setattr(state, "busy", 0)).start()
    idle, waited = quiet.wait_idle(LlamaServerClient(url), 10, interval=0.05)
    assert idle and waited < 10


def test_the_watch_sees_a_request_during_the_tune(server):
    url, state = server
    with quiet.Watch(LlamaServerClient(url), interval=0.05) as w:
        deadline = time.monotonic() + 10
        while w.polls < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert w.polls >= 3 and w.contended() == "" and w.blind_note() == ""
    with quiet.Watch(LlamaServerClient(url), interval=0.05) as w:
        state.busy = 1
        deadline = time.monotonic() + 10
        while not w.busy and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "served a request during the tune" in w.contended()


def test_a_watch_that_cannot_see_says_so():
    with quiet.Watch(LlamaServerClient("http://127.0.0.1:9"), interval=0.05) as w:
        deadline = time.monotonic() + 10
        while not w.blind and time.monotonic() < deadline:
            time.sleep(0.02)
    assert w.contended() == "" and "did not answer /slots" in w.blind_note()


def test_read_key_takes_the_first_key_as_llama_server_reads_the_file(tmp_path: Path):
    """specops.keyfile (common/arg.cpp's --api-key-file): empty and # lines skipped, nothing stripped."""
    f = tmp_path / "keys"
    f.write_text("# the keys\n\n  sk-one  \nsk-two\n")
    assert quiet.read_key(f) == "  sk-one  " and quiet.read_key(None) == ""
    f.write_text("sk-one\nsk-two\n")
    assert quiet.read_key(f) == "sk-one"


def test_the_bench_report_draws_no_plots_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The tune on a deployed host measures with the bench, whose report drew its plots with matplotlib, which the
    host's install does not have (the demo's deploy died there: ModuleNotFoundError at the end of a 6-minute tune)."""
    import sys

    from specops.bench import report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert report.plots({}, [], [], None, {}, tmp_path / "assets") == []
