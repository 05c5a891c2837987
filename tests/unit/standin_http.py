"""The threaded HTTP server under the unit tests' stand-in servers (test_exporter_faults' FaultServer,
test_loadbalancer's backends).

A client that hangs up is not the stand-in's error: a keep-alive connection reset by its client (HAProxy stopping, an
HTTP client pool closed when it is garbage-collected) raises ConnectionResetError in the handler thread still waiting
for the next request, and socketserver prints that traceback to sys.stderr whenever it happens, often during a later
test on the same worker, whose captured stderr it then corrupts (seen once: a one-line-error test got 22 lines).
Such hang-ups are counted in ``hangups``; any other handler error is printed as before."""

from __future__ import annotations

import sys
import threading
from http.server import ThreadingHTTPServer


class StandInHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args, **kwargs) -> None:
        self.hangups = 0
        super().__init__(*args, **kwargs)

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            self.hangups += 1
            return
        super().handle_error(request, client_address)


def serve(handler: type) -> tuple[StandInHTTPServer, str, threading.Thread]:
    """A stand-in on a free loopback port, served from a daemon thread: (server, base URL, thread). Its
    shutdown() waits out one poll: 0.05 s, not the default 0.5 s (some tests start a server per example)."""
    httpd = StandInHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}", thread
