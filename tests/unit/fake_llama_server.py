#!/usr/bin/env python3
"""A stand-in for llama-server in fast bench tests: /health, /slots, /metrics, streamed chat.

Behaviour from the environment: FAKE_DIE_AFTER=N exits (code 3) during the N+1-th chat request
(the warm-up counts); FAKE_SPEC=1 makes /slots report speculation and counts drafts; FAKE_TEXT_SUFFIX
is appended to every answer (to make an arm diverge); FAKE_TPS sets the decode rate it reports (default
50), varied per task by the prompt's length (the same for every server, like real tasks), and FAKE_NOISE
adds that much relative noise per request (deterministic). Only ``--port`` of the argv is used.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"chats": 0, "drafted": 0, "accepted": 0, "drafts": 0}
DIE_AFTER = int(os.environ.get("FAKE_DIE_AFTER", "-1"))
SPEC = os.environ.get("FAKE_SPEC") == "1"
SUFFIX = os.environ.get("FAKE_TEXT_SUFFIX", "")
TPS = float(os.environ.get("FAKE_TPS", "50"))
NOISE = float(os.environ.get("FAKE_NOISE", "0"))


STEP = 0.005


def work(seconds: float) -> None:
    """Take ``seconds`` of running time in sleeps of at most 5 ms: like a real server it makes no progress while
    paused (SIGSTOP; a sleep the pause outlasted counts as one step), and it leaves the CPU to the rest of the suite
    (it used to compute for that long: ~75 s of CPU per suite run)."""
    left = seconds
    while left > 0:
        step = min(STEP, left)
        time.sleep(step)
        left -= step


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, '{"status":"ok"}')
        elif self.path == "/slots":
            self._send(200, json.dumps([{"id": 0, "speculative": SPEC, "is_processing": False}]))
        elif self.path == "/metrics":
            lines = [
                "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
                f"llamacpp:spec_decode_num_draft_tokens_total {STATE['drafted']}",
                "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
                f"llamacpp:spec_decode_num_accepted_tokens_total {STATE['accepted']}",
                "# TYPE llamacpp:spec_decode_num_drafts_total counter",
                f"llamacpp:spec_decode_num_drafts_total {STATE['drafts']}",
                "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter",
                f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {STATE["drafts"]}',
            ]
            self._send(200, "\n".join(lines) + "\n", "text/plain")
        else:
            self._send(404, "{}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        STATE["chats"] += 1
        if DIE_AFTER >= 0 and STATE["chats"] > DIE_AFTER:
            os._exit(3)
        prompt = body["messages"][-1]["content"]
        n = min(int(body.get("max_tokens", 8)), 8)
        pieces = [f"echo {len(prompt)}"] + [f" w{i}" for i in range(1, n)]
        pieces[-1] += SUFFIX
        rate = TPS * (1 + 0.05 * (len(prompt) % 7 - 3)) * (1 + NOISE * math.sin(1.7 * STATE["chats"] + TPS))
        timings = {
            "predicted_n": n,
            "predicted_ms": 1000.0 * (n - 1) / rate,
            "predicted_per_second": rate,
            "prompt_n": 10,
            "prompt_ms": 5.0,
        }
        if SPEC:
            STATE["drafted"] += 8
            STATE["accepted"] += 6
            STATE["drafts"] += 2
            timings.update(draft_n=8, draft_n_accepted=6)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        first = {"choices": [{"delta": {"role": "assistant", "content": None}}]}
        self.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
        for i, piece in enumerate(pieces):  # one chunk per token, at the rate it reports (time-sliced tests)
            if i:
                work(1.0 / rate)
            self.wfile.write(f"data: {json.dumps({'choices': [{'delta': {'content': piece}}]})}\n\n".encode())
            self.wfile.flush()
        last = {"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": timings}
        self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def main() -> None:
    argv = sys.argv
    port = int(argv[argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
