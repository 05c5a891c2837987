#!/usr/bin/env python3
"""A stand-in for TabbyAPI's /health and /metrics (TabbyAPI needs a CUDA GPU; no machine here has one).

``fake_tabbyapi_server.py --port P --switch-after N BODY1 BODY2 ...`` serves BODY1's text as /metrics for the first
N GETs, then BODY2 for the next N, and so on, staying on the last: what TabbyAPI's /metrics renders as requests
finish (its counters move when a generation ends). The bodies are the fixtures rendered by TabbyAPI's own
``common/metrics.py`` (tests/fixtures/exporter/tabbyapi-5b73894*.txt). /health answers as TabbyAPI's does when
healthy; every other path is a 404 with FastAPI's body, as TabbyAPI has no /slots nor /props.
With ``--switch-after 0`` the body changes only when the test says so (``GET /advance``): a generation ending at a
moment the test chooses, e.g. once Prometheus has a sample of the first body.
"""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--switch-after", type=int, default=3)
    ap.add_argument("bodies", nargs="+", type=Path)
    args = ap.parse_args()
    bodies = [p.read_bytes() for p in args.bodies]
    lock = threading.Lock()
    gets = [0]
    advanced = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b'{"status":"healthy","issues":[]}', "application/json")
            elif self.path == "/metrics":
                with lock:
                    step = gets[0] // args.switch_after if args.switch_after > 0 else advanced[0]
                    i = min(step, len(bodies) - 1)
                    gets[0] += 1
                self._send(200, bodies[i], "text/plain; version=0.0.4")
            elif self.path == "/advance" and args.switch_after == 0:
                with lock:
                    advanced[0] += 1
                self._send(200, b"{}", "application/json")
            else:
                self._send(404, b'{"detail":"Not Found"}', "application/json")

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
