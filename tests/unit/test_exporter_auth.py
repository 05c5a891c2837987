"""A keyed llama-server and the exporter's API key (issue 40): a refused key is ``kind="auth"``, not a server down.

The stand-in answers as llama-server does at 0c1e57098 (tools/server/server-http.cpp,
``middleware_validate_api_key``): ``/health`` needs no key; every other path wants ``Authorization: Bearer KEY``
and answers a wrong or missing one with 401 and ``{"error": {"message": "Invalid API Key", ...}}``. It serves the
real captures of tests/fixtures/llama-server-0c1e57098.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specops.exporter.app import Exporter
from specops.exporter.config import ExporterConfig
from specops.exporter.state import Scraper
from specops.server import free_port
from tests.unit.standin_http import serve

CAP = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server-0c1e57098"
KEY = "sk-right-key"
PUBLIC = ("/health", "/v1/health")
INVALID_KEY = json.dumps({"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}})


class KeyedServer:
    """llama-server with ``--api-key``: the key it accepts, and the Authorization headers it was sent, per path."""

    def __init__(self, key: str = KEY, refusal: int = 401) -> None:
        self.key = key
        self.refusal = refusal
        self.seen: list[tuple[str, str | None]] = []
        bodies = {"/health": CAP / "spec_health.json", "/metrics": CAP / "spec_metrics_after_bench.txt",
                  "/slots": CAP / "spec_slots.json", "/props": CAP / "spec_props.json"}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                auth = self.headers.get("Authorization")
                outer.seen.append((self.path, auth))
                if self.path not in PUBLIC and auth != f"Bearer {outer.key}":
                    self._send(outer.refusal, INVALID_KEY.encode(), "application/json; charset=utf-8")
                elif self.path in bodies:
                    ctype = "text/plain; version=0.0.4" if self.path == "/metrics" else "application/json"
                    self._send(200, bodies[self.path].read_bytes(), ctype)
                else:
                    self._send(404, b'{"error": "not found"}', "application/json")

        self.httpd, self.url, self.thread = serve(Handler)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def keyed() -> Iterator[KeyedServer]:
    server = KeyedServer()
    yield server
    server.close()


def scraper(url: str, api_key: str | None) -> Scraper:
    return Scraper(ExporterConfig(server_url=url, timeout=2.0, pid_from_port=False, nvidia_smi="off", api_key=api_key))


def errors(s: Scraper) -> dict[tuple[str, str], int]:
    return {k: v for k, v in s.selfm.copy()[0].items() if v}


def test_a_wrong_key_is_an_auth_error_up_0_and_healthy_1(keyed: KeyedServer, caplog) -> None:
    s = scraper(keyed.url, "sk-wrong-key")
    with caplog.at_level(logging.WARNING, logger="specops.exporter"):
        for _ in range(3):
            snap = s.scrape_once()
    assert snap.healthy and not snap.up and snap.auth_refused
    assert snap.metrics is None and snap.slots is None
    assert errors(s) == {("metrics", "auth"): 3, ("slots", "auth"): 3}  # no http_4xx; /health needed no key
    assert ("/metrics", "Bearer sk-wrong-key") in keyed.seen  # the key was sent, and refused
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics:")]
    assert len(warnings) == 1, warnings  # once, not once a pass
    assert "HTTP 401" in warnings[0] and "refused the exporter's API key" in warnings[0], warnings[0]


def test_no_key_against_a_keyed_server_says_the_exporter_has_none(keyed: KeyedServer, caplog) -> None:
    s = scraper(keyed.url, None)
    with caplog.at_level(logging.WARNING, logger="specops.exporter"):
        snap = s.scrape_once()
    assert snap.healthy and not snap.up and snap.auth_refused
    assert errors(s)[("metrics", "auth")] == 1
    assert ("/metrics", None) in keyed.seen
    assert any("wants an API key and the exporter has none" in r.getMessage() for r in caplog.records)


def test_the_right_key_reads_everything() -> None:
    server = KeyedServer()
    try:
        s = scraper(server.url, KEY)
        snap = s.scrape_once()
        assert snap.up and snap.healthy and not snap.auth_refused and errors(s) == {}
        assert snap.props.build_commit == "0c1e57098" and snap.slots is not None
    finally:
        server.close()


def test_a_403_from_a_proxy_in_front_is_auth_too() -> None:
    server = KeyedServer(refusal=403)
    try:
        s = scraper(server.url, "sk-wrong-key")
        snap = s.scrape_once()
        assert snap.auth_refused and not snap.up and errors(s)[("metrics", "auth")] == 1
    finally:
        server.close()


def test_other_4xx_are_not_auth(keyed: KeyedServer) -> None:
    """A 404 (a build without the endpoint) stays http_4xx, and auth_refused 0: LlamaServerDown's case."""
    s = Scraper(ExporterConfig(server_url=keyed.url + "/nowhere", pid_from_port=False, nvidia_smi="off", api_key=KEY))
    snap = s.scrape_once()
    assert not snap.up and not snap.auth_refused and errors(s).get(("metrics", "http_4xx")) == 1


def families(url: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(httpx.get(url, timeout=5).text)}


def wait_for(url: str, pred: Callable[[dict[str, list]], bool], what: str, timeout: float = 30) -> dict[str, list]:
    deadline = time.monotonic() + timeout
    fams: dict[str, list] = {}
    while time.monotonic() < deadline:
        fams = families(url)
        if pred(fams):
            return fams
        time.sleep(0.05)  # polling interval only: the condition decides, within the deadline
    raise AssertionError(f"{what} not reached within {timeout}s: {fams.get('llamacpp_up')}")


def value(fams: dict[str, list], name: str, **labels: str) -> float:
    return next(s.value for s in fams[name] if all(s.labels.get(k) == v for k, v in labels.items()))


def test_the_served_exposition_says_auth_refused_and_recovers_when_the_keys_agree(keyed: KeyedServer) -> None:
    port = free_port()
    exp = Exporter(ExporterConfig(server_url=keyed.url, listen_port=port, interval=1.0, timeout=2.0,
                                  pid_from_port=False, nvidia_smi="off", api_key="sk-old-key"))
    exp.start()
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        # the error counters move as the pass reads; the gauges come with the pass's snapshot: wait for both
        fams = wait_for(url, lambda f: value(f, "specops_exporter_scrape_errors", endpoint="metrics", kind="auth")
                        >= 1 and value(f, "llamacpp_exporter_auth_refused") == 1
                        and value(f, "llamacpp_healthy") == 1, "an auth error, refused, healthy")
        assert value(fams, "llamacpp_up") == 0
        assert value(fams, "specops_exporter_scrape_errors", endpoint="metrics", kind="http_4xx") == 0
        keyed.key = "sk-old-key"  # the operator puts the exporter's key back on the server
        fams = wait_for(url, lambda f: value(f, "llamacpp_up") == 1 and value(f, "llamacpp_healthy") == 1,
                        "llamacpp_up 1, healthy")
        assert value(fams, "llamacpp_exporter_auth_refused") == 0
    finally:
        exp.shutdown()


def test_the_first_key_of_a_file_with_several_is_sent(keyed: KeyedServer, tmp_path: Path) -> None:
    """The key file as llama-server reads --api-key-file (specops.keyfile): one key per line, blank and # lines
    skipped. The exporter sends the first key; it used to send the whole file stripped (every line at once)."""
    from specops.cli import build_parser
    from specops.commands.exporter import config_from_args

    key_file = tmp_path / "api-key"
    key_file.write_text(f"# the lab's keys\n\n{KEY}\nsk-second-key\n")
    cfg = config_from_args(build_parser().parse_args(
        ["exporter", "--server-url", keyed.url, "--timeout", "2", "--no-pid-from-port", "--nvidia-smi", "off",
         "--api-key-file", str(key_file)]))
    assert cfg.api_key == KEY
    s = Scraper(cfg)
    snap = s.scrape_once()
    assert snap.up and not snap.auth_refused and errors(s) == {}
    assert ("/metrics", f"Bearer {KEY}") in keyed.seen
