"""specops.host.drain on a busy service (issue 63 item 4): new requests are held from the drain's
first moment by a listener of its own beside the server's (SO_REUSEPORT), so only the requests already in flight must
finish; the held requests go to the new server once it answers /health, or are answered 503 with Retry-After. Against
stand-in servers on this machine (real sockets, real signals) that, like llama-server, listen with SO_REUSEPORT, cut
every answer in flight the moment they are signalled, and answer 503 without Retry-After while they "load"."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from specops.host import drain
from specops.host.drain import restart  # restart_held's module: its KEEPALIVE_S
from tests.unit.hostcode import argv

pytestmark = pytest.mark.skipif(not (hasattr(os, "pidfd_open") and hasattr(socket, "SO_REUSEPORT")),
                                reason="needs Linux pidfds and SO_REUSEPORT")

# llama-server's part: SO_REUSEPORT on its listener (cpp-httplib), $SLOTS slots in /slots, 503 without Retry-After
# for the first $LOAD s (loading), /N streams N pieces 0.1 s apart then "data: [DONE]", an idle kept-alive connection
# closed after $KEEPALIVE s, SIGTERM exits at once.
STANDIN = r"""
import http.server, json, os, signal, socket, socketserver, sys, threading, time
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
t0, load, slots = time.monotonic(), float(os.environ.get("LOAD", "0")), int(os.environ.get("SLOTS", "4"))
busy, lock = [0], threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = float(os.environ.get("KEEPALIVE", "5"))   # an idle kept-alive connection closed after (cpp-httplib: 5)
    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if time.monotonic() - t0 < load:
            return self.reply(503, b'{"error": {"message": "Loading model", "code": 503}}')
        if self.path == "/health":
            return self.reply(200, b'{"status": "ok"}')
        if self.path == "/slots":
            return self.reply(200, json.dumps([{"id": i, "is_processing": i < busy[0]} for i in range(slots)]).encode())
        with lock:
            busy[0] += 1
        try:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(int(self.path.strip("/"))):
                piece = f"data: {i}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.1)
            piece = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(piece), piece))
            self.wfile.flush()
        finally:
            with lock:
                busy[0] -= 1
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

# systemctl for one unit whose main process is a stand-in: show (MainPID, a DynamicUser), stop, start
SYSTEMCTL = r"""#!{python}
import os, signal, subprocess, sys, time
state = os.environ["FAKE_STATE"]
def main_pid():
    try:
        pid = int(open(state + "/pid").read())
        with open(f"/proc/{pid}/stat") as fh:
            return 0 if fh.read().rsplit(")", 1)[1].split()[0] in "ZX" else pid
    except (OSError, ValueError):
        return 0
if sys.argv[1] == "show":
    print(f"MainPID={main_pid()}\nDynamicUser=yes\nUser=")
elif sys.argv[1] == "stop" and main_pid():
    os.kill(main_pid(), signal.SIGKILL)
    end = time.monotonic() + 10
    while main_pid() and time.monotonic() < end:
        time.sleep(0.01)
elif sys.argv[1] == "start":
    proc = subprocess.Popen([sys.executable, state + "/standin.py", os.environ["FAKE_PORT"]],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    open(state + "/pid", "w").write(str(proc.pid))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the stand-in on {port} never answered /health")


@pytest.fixture
def service(tmp_path, request):
    """A "unit" on a free port whose main process is a stand-in; systemctl faked on PATH. Parameter: the stand-in's
    kept-alive timeout (s)."""
    (tmp_path / "standin.py").write_text(STANDIN)
    fake = tmp_path / "bin" / "systemctl"
    fake.parent.mkdir()
    fake.write_text(SYSTEMCTL.replace("{python}", sys.executable))
    fake.chmod(0o755)
    port = free_port()
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "FAKE_STATE": str(tmp_path),
           "FAKE_PORT": str(port), "LOAD": "1.5", "SLOTS": "4", "KEEPALIVE": str(getattr(request, "param", 5))}
    subprocess.run(["systemctl", "start"], env=env, check=True)
    wait_healthy(port)
    yield SimpleNamespace(port=port, env=env, url=f"http://127.0.0.1:{port}")
    subprocess.run(["systemctl", "stop"], env=env, check=False)


class Client:
    """One client sending /15 (1.5 s streamed) back to back until stopped; one record a request."""

    def __init__(self, port: int) -> None:
        self.port, self.records, self.stop = port, [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            rec = {"start": time.time(), "pieces": 0, "whole": False, "status": None, "retry_after": None,
                   "error": None}
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                conn.request("GET", "/15")
                resp = conn.getresponse()
                rec.update(status=resp.status, retry_after=resp.getheader("Retry-After"))
                for line in resp:
                    if resp.status == 200 and line.startswith(b"data: "):
                        rec["pieces"] += 1
                        rec["whole"] = rec["whole"] or line.strip() == b"data: [DONE]"
                conn.close()
            except (OSError, http.client.HTTPException) as exc:
                rec["error"] = repr(exc)
            rec["end"] = time.time()
            self.records.append(rec)
            if not rec["whole"]:
                time.sleep(0.2)

    def wait_whole(self, after: float, deadline_s: float = 60) -> None:
        deadline = time.monotonic() + deadline_s
        while not any(r["whole"] and r["start"] >= after for r in self.records):
            assert time.monotonic() < deadline, self.records[-3:]
            time.sleep(0.05)


@pytest.mark.parametrize("mode", ["hand over", "refuse"])
def test_a_busy_restart_holds_new_requests_from_the_start_and_cuts_none(service, mode):
    """4 clients back to back against 4 slots: the slots are never all idle. The drain holds new requests from
    its first moment, waits only for those in flight, restarts, and the held ones are answered by the new server
    (or, with --hold-limit 0, refused at once with Retry-After): none cut, no 503 without Retry-After (the new
    server's loading window is held too), no refused connection."""
    if mode == "hand over" and not drain.can_migrate():
        pytest.skip(f"{drain.MIGRATE} is off and this process may not turn it on")
    clients = [Client(service.port) for _ in range(4)]
    try:
        for c in clients:
            c.wait_whole(after=0)
        args = ["--timeout", "30", "--grace", "5", "--health-timeout", "30"]
        proc = subprocess.run([*argv("drain"), "--unit", "x.service", "--url", service.url, *args,
                               *(["--hold-limit", "0"] if mode == "refuse" else [])],
                              capture_output=True, text=True, env=service.env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        ended = time.time()
        for c in clients:   # each is answered by the new server
            c.wait_whole(after=ended)
    finally:
        for c in clients:
            c.stop.set()
        for c in clients:
            c.thread.join(30)
    records = [r for c in clients for r in c.records]
    assert out["held"] == "listener" and out["drained"] and out["requests"]["cut"] == 0, out
    assert [r for r in records if r["pieces"] and not r["whole"]] == [], out          # none cut
    during = [r for r in records if r["end"] >= out["began"] and not r["whole"]]
    assert all(r["status"] == 503 and r["retry_after"] == "5" for r in during), (during, out)
    if mode == "hand over":
        assert out["requests"]["held"] > 0 and out["requests"]["refused"] == 0 and during == [], (during, out)
        assert out["released"] == "handed to the new server", out
    else:
        assert out["requests"]["refused"] > 0 and out["requests"]["held"] == 0 and during, out
    # the drain waited only for the requests in flight when it began: no longer than the longest of them
    in_flight = [r for r in records if r["start"] <= out["began"] < r["end"] and r["whole"]]
    assert in_flight and out["in_flight"] > 0, out
    assert out["waited_s"] <= max(r["end"] - r["start"] for r in in_flight) + 1.0, (out, in_flight)


def test_the_service_listens_with_so_reuseport_where_its_build_can():
    """The hold from the start needs llama-server's listener in a SO_REUSEPORT group: the role's unit asks for it
    (llama_server_reuse_port, default true: tests/unit/test_knobs.py keeps the role's default the table's) where
    the build has --reuse-port; a build without the flag runs without it (the drain then holds after an idle look),
    and so does a profile of bench or soak, which leaves it unset."""
    from specops.argv import build_argv
    from specops.capabilities import parse_help
    from specops.knobs import knob
    from specops.profile import ServerProfile

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    current = parse_help((fixtures / "llama-server-0c1e57098" / "llama-server_help.txt").read_text())
    older = parse_help((fixtures / "llama-server-4227c9be4" / "help.txt").read_text())
    assert knob("reuse_port").default is True
    role = ServerProfile(model="/m.gguf", reuse_port=True)
    assert "--reuse-port" in build_argv(role, current) and "--reuse-port" not in build_argv(role, older)
    assert "--reuse-port" not in build_argv(ServerProfile(model="/m.gguf"), current)


def listener(address: str, reuseport: bool = True) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    if reuseport:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((address, 0))
    sock.listen()
    return sock


def answer_ok(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_the_listener_takes_every_new_connection_and_the_drains_own_looks_reach_the_server(address):
    """The group's program, IPv4 and IPv6: a client's connection waits in the drain's queue, the drain's own look
    reaches the server; once the server is gone and another has joined, the held connection (its request with
    it) is the new one's, or is answered 503 with Retry-After where the queue cannot move."""
    try:
        old = listener(address)
    except OSError as exc:   # a machine without IPv6 on its loopback
        pytest.skip(f"cannot listen on {address}: {exc}")
    port = old.getsockname()[1]
    url = f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"
    args = SimpleNamespace(url=url, hold_limit=60, retry_after=5)
    hold, why = drain.Hold.begin(os.getpid(), port, args)
    assert hold is not None, why
    client = socket.create_connection((address, port), timeout=5)
    client.sendall(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
    deadline = time.monotonic() + 5
    while hold.queued() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hold.queued() == 1                                  # held: not the server's
    threading.Thread(target=answer_ok, args=(old,), daemon=True).start()
    assert hold.ask("/health", {}) == (200, b"ok")             # the drain's look is the server's
    old.close()
    hold.mine, hold.other = 0, 1
    hold.attach(drain.steer(hold.mine, hold.other))
    new = socket.socket(old.family)
    new.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    new.bind((address, port))
    new.listen()
    hold.release()
    assert hold.finish()["held"] + hold.refused == 1, hold.outcome
    if hold.held:
        new.settimeout(5)
        conn, _ = new.accept()
        assert conn.recv(100).startswith(b"GET /held ")          # the request came with it
        conn.close()
    else:
        assert b"\r\nRetry-After: 5\r\n" in client.recv(1000)
    for s in (client, new):
        s.close()


def test_a_server_without_so_reuseport_is_held_as_before():
    """A listener the drain cannot join (another build, another owner): no hold of its own, and the reason."""
    old = listener("127.0.0.1", reuseport=False)
    try:
        args = SimpleNamespace(url=f"http://127.0.0.1:{old.getsockname()[1]}", hold_limit=60, retry_after=5)
        hold, why = drain.Hold.begin(os.getpid(), old.getsockname()[1], args)
        assert hold is None and "Address already in use" in why, why
        with socket.create_connection(("127.0.0.1", old.getsockname()[1]), timeout=2):
            pass                                                # still the server's alone
    finally:
        old.close()


def test_a_drain_stopped_while_it_holds_hands_its_connections_back_to_the_server(service):
    """SIGTERM to the drain while it waits for an answer in flight: the connection it held goes to the server
    that still runs, which answers it whole."""
    if not drain.can_migrate():
        pytest.skip(f"{drain.MIGRATE} is off and this process may not turn it on")
    flight: dict = {}

    def stream() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)
        conn.request("GET", "/60")
        flight["pieces"] = sum(1 for line in conn.getresponse() if line.startswith(b"data: "))

    threading.Thread(target=stream, daemon=True).start()
    time.sleep(0.5)
    proc = subprocess.Popen([*argv("drain"), "--unit", "x.service", "--url", service.url,
                             "--timeout", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=service.env)
    time.sleep(1.5)                      # the hold has begun: a new request waits in the drain's queue
    held: dict = {}

    def one() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)
        conn.request("GET", "/2")
        held["body"] = conn.getresponse().read()

    asker = threading.Thread(target=one, daemon=True)
    asker.start()
    time.sleep(0.5)
    assert "body" not in held
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    asker.join(30)
    assert held.get("body", b"").endswith(b"data: [DONE]\n\n"), held    # answered by the server that still runs


@pytest.mark.parametrize("service", [60], indirect=True)   # its idle kept-alive connections stay open
def test_without_filters_a_kept_alive_connection_open_past_the_keepalive_bound_does_not_hold_the_restart(
        service, monkeypatch):
    """Where the drain may not filter the old server's connections (a container's seccomp filter), a client that
    keeps one connection and uses it more often than the server's keep-alive timeout (the exporter's pool) keeps
    it open: with every slot idle it is taken to be idle once it has been open past that bound, and the signal
    goes at a frozen instant -- not at the drain's deadline."""
    kept = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            try:
                kept.request("GET", "/slots")
                kept.getresponse().read()
            except (OSError, http.client.HTTPException):
                return
            time.sleep(0.4)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    monkeypatch.setenv("PATH", service.env["PATH"])
    for name in ("FAKE_STATE", "FAKE_PORT"):
        monkeypatch.setenv(name, service.env[name])
    monkeypatch.setattr(restart, "KEEPALIVE_S", 0)               # the bound: 2 s
    monkeypatch.setattr(drain.Doors, "close", lambda self, listeners=True: "no filters here (the test's)")
    time.sleep(0.5)
    pid = int((Path(service.env["FAKE_STATE"]) / "pid").read_text())
    args = SimpleNamespace(url=service.url, hold_limit=60, retry_after=5, interval=0.05, grace=5, unit="x.service",
                           action="stop", free_port=None, free_port_timeout=1, health_timeout=10)
    hold, why = drain.Hold.begin(pid, service.port, args)
    assert hold is not None, why
    pidfd = os.pidfd_open(pid)
    out: dict = {}
    try:
        assert drain.restart_held(args, hold, pid, pidfd, service.port, {}, time.monotonic() + 60, out) == 0
    finally:
        os.close(pidfd)
        stop.set()
        scraper.join(5)
    assert out["no_filters"] and out["open_at_signal"] == 1 and 1.9 < out["waited_s"] < 15, out
    assert out["drained"] and out["stop_hung"] is False and out["requests"]["cut"] == 0, out
