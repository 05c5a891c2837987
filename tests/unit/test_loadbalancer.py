"""roles/loadbalancer against a real HAProxy (the Debian package) in front of two stand-in HTTP servers: the
rendered haproxy.cfg passes `haproxy -c`, and specops.host.haproxy_admin drains a server (waiting for the stream it
serves to finish, while new requests go to the other one) and puts it back (waiting for its health check)."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jinja2
import pytest
import yaml

from tests.unit.hostcode import argv
from tests.unit.standin_http import StandInHTTPServer

ROLE = Path(__file__).resolve().parents[2] / "roles" / "loadbalancer"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

pytestmark = pytest.mark.skipif(not Path(HAPROXY).exists(), reason="haproxy is not installed (scripts/bootstrap)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stand_in(StandInHTTPServer):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(("127.0.0.1", free_port()), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        name = self.server.name  # type: ignore[attr-defined]
        if self.path == "/health":
            body = b'{"status":"ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("X-Server", name)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(10):
                chunk = f"data: {i}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                time.sleep(0.3)
            self.wfile.write(b"0\r\n\r\n")
        else:
            body = name.encode()
            self.send_response(200)
            self.send_header("X-Server", name)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


def render(servers: list[dict], sock: Path, port: int) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string((ROLE / "templates" / "haproxy.cfg.j2").read_text())
    text = template.render(**{**defaults, "loadbalancer_admin_socket": str(sock), "loadbalancer_port": port,
                              "loadbalancer_bind_address": "127.0.0.1", "_loadbalancer_servers": servers,
                              "loadbalancer_check_interval": "200ms"})
    return text.replace("    log /dev/log local0\n", "").replace("    daemon\n", "")


@pytest.fixture
def balanced(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, Stand_in]]]:
    stand_ins = {name: Stand_in(name) for name in ("web1", "web2")}
    for s in stand_ins.values():
        threading.Thread(target=s.serve_forever, daemon=True).start()
    sock, port = tmp_path / "admin.sock", free_port()
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(render([{"name": n, "address": "127.0.0.1", "port": s.server_address[1]}
                           for n, s in stand_ins.items()], sock, port))
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not all(admin(sock, n, "state").get("status", "").startswith("UP") for n in stand_ins):
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "HAProxy did not see both servers UP"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", sock, stand_ins
    finally:
        proc.terminate()
        proc.wait(10)
        for s in stand_ins.values():
            s.shutdown()
            s.server_close()


def admin(sock: Path, server: str, *args: str) -> dict:
    run = subprocess.run([*argv("haproxy_admin"), "--socket", str(sock), "--backend", "llama_servers",
                          "--server", server, *args], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        return {"rc": run.returncode, "stderr": run.stderr}
    return json.loads(run.stdout)


def test_the_rendered_config_passes_haproxy_check(tmp_path: Path) -> None:
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(render([{"name": "host-1", "address": "10.0.0.1", "port": 8080},
                           {"name": "host-2", "address": "10.0.0.2", "port": 8081}], tmp_path / "a.sock", 8000))
    run = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "server host-2 10.0.0.2:8081 check" in cfg.read_text()


def test_drain_waits_for_the_stream_in_flight_and_ready_waits_for_up(balanced) -> None:
    url, sock, _ = balanced
    pieces: list[bytes] = []
    served_by: list[str] = []

    def stream() -> None:
        with httpx.stream("GET", f"{url}/stream", timeout=30) as r:
            served_by.append(r.headers["x-server"])
            pieces.extend(r.iter_bytes())

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 10
    while not served_by and time.monotonic() < deadline:
        time.sleep(0.05)
    busy_server = served_by[0]
    other = "web2" if busy_server == "web1" else "web1"
    result: dict = {}
    drainer = threading.Thread(target=lambda: result.update(admin(sock, busy_server, "drain", "--timeout", "60")))
    drainer.start()
    # while it drains, new requests all go to the other server
    time.sleep(0.3)
    during = {httpx.get(f"{url}/x", timeout=10).headers["x-server"] for _ in range(6)}
    drainer.join(60)
    t.join(30)
    assert result.get("drained") is True and result["in_flight"] == 0, result
    assert result["waited_s"] > 0.5, result  # it waited for the stream, which ran ~3 s
    assert b"".join(pieces).count(b"data: ") == 10  # the stream was not cut
    assert during == {other}
    assert admin(sock, busy_server, "state")["status"].startswith("DRAIN")
    back = admin(sock, busy_server, "ready", "--wait-up", "30")
    assert back["up"] is True and back["status"].startswith("UP"), back
    seen = {httpx.get(f"{url}/x", timeout=10).headers["x-server"] for _ in range(10)}
    assert seen == {"web1", "web2"}


def test_a_server_haproxy_does_not_know_is_one_line(balanced) -> None:
    _, sock, _ = balanced
    out = admin(sock, "nope", "drain")
    assert out["rc"] == 1 and "no server llama_servers/nope (it has: llama_servers/web1, llama_servers/web2)" in \
        out["stderr"] and len(out["stderr"].strip().splitlines()) == 1


def test_an_unreachable_runtime_api_is_one_line(tmp_path: Path) -> None:
    out = admin(tmp_path / "missing.sock", "web1", "state")
    assert out["rc"] == 1 and "cannot reach HAProxy's runtime API" in out["stderr"]
