"""specops.host.speed_probe against two stand-in servers whose /slots tell the truth about their
requests: the probe measures a pair only while nobody else's request runs, discards and retries a pair another
request ran beside, and gives up at its idle deadline -- which the judge turns into "unproven", never a verdict.
(Stand-ins: the gate's rules are about what /slots says; the real server is exercised by the deploy tests.)"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specops.speedgate import judge, message
from tests.unit.hostcode import argv


class _Joined(ThreadingHTTPServer):
    """Request threads that end with the server: ``server_close`` joins them (ThreadingHTTPServer's daemon threads
    are not joined), and a client that hung up is not a traceback. A handler left sleeping past its test once wrote
    into a closed socket while another test on the worker parsed source: the traceback printer's ``ast.parse`` in
    that thread raced it (CPython 3.11.7 keeps the AST converter's recursion depth per interpreter, not per thread:
    "SystemError: AST constructor recursion depth mismatch")."""

    daemon_threads = False

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Server:
    """/health, /slots (our requests + ``foreign`` requests of an imagined client), chat that takes 0.3 s."""

    def __init__(self, tps: float) -> None:
        self.tps, self.ours, self.foreign, self.prompts, self.chats = [tps], 0, 0, [], []
        self.peak = 0  # the most of our requests in flight at once
        self.chat_seconds = 0.3  # how long a chat completion takes
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/slots":
                    with server.lock:
                        busy = server.ours + server.foreign
                    self._send([{"id": i, "is_processing": i < busy} for i in range(max(busy, 1))])
                else:
                    self._send({"status": "ok"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.ours += 1
                    server.peak = max(server.peak, server.ours)
                chat = self.path == "/v1/chat/completions"
                if chat:
                    server.prompts.append(body["messages"][-1]["content"])
                    server.chats.append(body["messages"])
                try:
                    time.sleep(server.chat_seconds if chat else 0.3)
                finally:
                    with server.lock:
                        server.ours -= 1
                tps = server.tps[len(server.prompts) % len(server.tps)]
                self._send({"timings": {"predicted_n": 32, "predicted_per_second": tps, "draft_n": 0,
                                        "draft_n_accepted": 0}})

        self.httpd = _Joined(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    a, b = Server(10.0), Server(20.0)
    yield a, b
    a.close()
    b.close()


def run_probe(a: Server, b: Server, prompts: int, idle_timeout: float, *extra: str) -> dict:
    what = ["--prompts", json.dumps([f"prompt {i}" for i in range(prompts)])] if prompts else []
    out = subprocess.run([*argv("speed_probe"), "--url", a.url, "--url", b.url, *what, "--tokens", "32",
                          "--timeout", "30",
                          "--idle-timeout", str(idle_timeout), "--watch-interval", "0.05", *extra],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_idle_servers_give_every_pair_and_a_verdict(servers) -> None:
    a, b = servers
    out = run_probe(a, b, 3, 30)
    assert out["contended"] == [] and not out["gave_up"] and len(out["requests"]) == 6
    verdict = judge(out, out, a.url, b.url)
    assert verdict["verdict"] == "loses" and verdict["ratio"] == pytest.approx(0.5)


def test_a_pair_beside_another_request_is_discarded_and_asked_again_in_other_words(servers) -> None:
    a, b = servers

    def client() -> None:   # another request on b while the probe measures its first pair (a, then b)
        while not a.prompts:
            time.sleep(0.005)
        with b.lock:
            b.foreign += 1
        time.sleep(0.5)
        with b.lock:
            b.foreign -= 1

    thread = threading.Thread(target=client)
    thread.start()
    out = run_probe(a, b, 2, 30)
    thread.join()
    assert out["contended"] and out["contended"][0]["prompt"] == 0
    assert {r["prompt"] for r in out["requests"]} == {0, 1} and len(out["requests"]) == 4
    assert all(r["attempt"] == 1 for r in out["requests"] if r["prompt"] == 0)
    assert len(set(a.prompts)) == len(a.prompts)            # no server saw the same prompt twice
    assert judge(out, out, a.url, b.url)["contended"] == len(out["contended"])


def test_a_server_that_never_goes_quiet_is_unproven_not_judged(servers) -> None:
    a, b = servers
    a.foreign = 1                                            # a client streams on the service throughout
    t0 = time.monotonic()
    out = run_probe(a, b, 2, 1.5)
    assert time.monotonic() - t0 < 60
    assert out["requests"] == [] and "not idle" in out["gave_up"]
    verdict = judge(out, out, a.url, b.url)
    assert verdict["verdict"] == "unproven" and verdict["prompts"] == 0
    line = message(verdict, "fallback", "svc")
    assert "UNPROVEN" in line and "already proven on this host" in line


def test_a_noisy_host_gets_more_pairs_not_a_verdict_of_chance(servers) -> None:
    a, b = servers
    a.tps = [10.0, 4.0, 16.0, 7.0, 12.0]                     # the service's speed jumps from prompt to prompt
    out = run_probe(a, b, 3, 60, "--max-spread", "1.5")
    prompts = {r["prompt"] for r in out["requests"]}
    assert prompts == set(range(9)), prompts                 # 3 prompts + at most twice as many more
    assert len(set(a.prompts)) == len(a.prompts) == 9
    steady = run_probe(b, b, 3, 60, "--max-spread", "1.5")  # a steady ratio stops at the list's end
    assert {r["prompt"] for r in steady["requests"]} == {0, 1, 2}


def test_a_request_that_outlasts_the_timeout_is_unproven_not_a_traceback(servers) -> None:
    """Under a CPU hog a completion outlasted --timeout and the probe died with a raw TimeoutError traceback, so
    the deploy failed instead of judging: now the measuring stops there, the reason is said, and too few prompts
    make the verdict unproven."""
    a, b = servers
    b.chat_seconds = 5.0
    out = run_probe(a, b, 3, 30, "--timeout", "1")
    assert "failed: no answer within 1 s (prompt 1)" in out["gave_up"] and b.url in out["gave_up"], out
    assert not [r for r in out["requests"] if r["url"] == b.url]
    verdict = judge(out, out, a.url, b.url)
    assert verdict["verdict"] == "unproven" and "no answer within 1 s" in verdict["unproven_because"], verdict


def test_the_teams_tasks_are_timed_as_chats_the_workloads_in_turn(servers, tmp_path) -> None:
    """With the tune's own task files (llama_server_tune_tasks) the gate times that traffic: each task's whole chat
    (system message included), the workloads in turn, never a prompt on the command line or in the output."""
    a, b = servers
    tasks = tmp_path / "team.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"{w}-{i}", "workload": w, "messages": [
        {"role": "system", "content": f"system {w}"}, {"role": "user", "content": f"secret {w} {i}"}]}) + "\n"
        for w in ("edit", "prose") for i in range(3)))
    out = run_probe(a, b, 0, 30, "--tasks", str(tasks), "--task-count", "3")
    assert len(out["requests"]) == 6 and "secret" not in json.dumps(out)
    assert a.prompts == ["secret edit 0", "secret prose 0", "secret edit 1"]
    assert a.chats[0][0] == {"role": "system", "content": "system edit"}


def test_at_the_services_n_each_pair_is_n_requests_at_once_timed_as_aggregate_throughput(servers) -> None:
    """--streams 2 (a service at --parallel 2): each pair is 2 chats at once on each server, our 2 requests are not
    taken for somebody else's, every chat is new to its server, and the verdict says it was measured at 2 streams,
    per stream, with no one-stream break-even."""
    a, b = servers
    a.chat_seconds, b.chat_seconds = 1.0, 3.0  # long enough that two requests sent at once overlap on a loaded host;
    # plain decoding takes three times as long per request (at 1.0 against 2.0 s, the suite's load once read a pair
    # near 1: unproven)
    out = run_probe(a, b, 3, 30, "--streams", "2")
    assert out["streams"] == 2 and out["contended"] == [] and not out["gave_up"], out
    assert a.peak == 2 and b.peak == 2
    assert len(out["requests"]) == 6 and all(r["predicted_n"] == 64 for r in out["requests"])
    assert len(a.prompts) == 6 and len(set(a.prompts)) == 6  # 3 pairs of 2, no chat twice to a server
    rates = {(r["url"], r["prompt"]): r["predicted_per_second"] for r in out["requests"]}
    assert all(rates[(a.url, i)] > 1.5 * rates[(b.url, i)] for i in range(3)), rates  # aggregate, from wall time
    # 3 pairs: the spread rule (test_speedgate's) would read the host's load; the rule at N is what this test is about
    verdict = judge(out, out, a.url, b.url, draft_n_max=4, max_spread=100)
    assert verdict["streams"] == 2 and verdict["verdict"] == "pays" and verdict["break_even_acceptance"] is None
    assert verdict["speculative_total_tps"] == pytest.approx(2 * verdict["speculative_tps"], rel=1e-3)
    line = message(verdict, "fallback", "svc", parallel=2)
    assert "at 2 streams (2 requests at a time)" in line and "3 pairs of 2 requests" in line, line
    assert "per stream" in line and "specops saturate" not in line  # measured at the service's N: no caveat
    # measured one at a time for a 2-slot service: the caveat stays
    assert "specops saturate" in message({**verdict, "streams": 1}, "fallback", "svc", parallel=2)
