#!/usr/bin/env python3
"""A stand-in for llama-server in fast bench tests: /health, /slots, /metrics, streamed chat.

Behaviour from the environment: FAKE_DIE_AFTER=N exits (code 3) during the N+1-th chat request
(the warm-up counts); FAKE_SPEC=1 makes /slots report speculation and counts drafts; FAKE_TEXT_SUFFIX
is appended to every answer (to make an arm diverge). Only ``--port`` of the argv is used.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"chats": 0, "drafted": 0, "accepted": 0, "drafts": 0}
DIE_AFTER = int(os.environ.get("FAKE_DIE_AFTER", "-1"))
SPEC = os.environ.get("FAKE_SPEC") == "1"
SUFFIX = os.environ.get("FAKE_TEXT_SUFFIX", "")


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
        words = [f"w{i}" for i in range(min(int(body.get("max_tokens", 8)), 8))]
        text = f"echo {len(prompt)} " + " ".join(words) + SUFFIX
        timings = {
            "predicted_n": len(words) + 2,
            "predicted_ms": 100.0,
            "predicted_per_second": 50.0 + len(prompt) % 7,
            "prompt_n": 10,
            "prompt_ms": 5.0,
        }
        if SPEC:
            STATE["drafted"] += 8
            STATE["accepted"] += 6
            STATE["drafts"] += 2
            timings.update(draft_n=8, draft_n_accepted=6)
            timings["predicted_per_second"] *= 1.5
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"delta": {"role": "assistant", "content": None}}]}]
        for piece in [text[: len(text) // 2], text[len(text) // 2 :]]:
            chunks.append({"choices": [{"delta": {"content": piece}}]})
        chunks.append({"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": timings})
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


def main() -> None:
    argv = sys.argv
    port = int(argv[argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
