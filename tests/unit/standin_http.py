"""The threaded HTTP server under the unit tests' stand-in servers (test_exporter_faults' FaultServer,
test_loadbalancer's backends).

A client that hangs up is not the stand-in's error: a keep-alive connection reset by its client (HAProxy stopping, an
HTTP client pool closed when it is garbage-collected) raises ConnectionResetError in the handler thread still waiting
for the next request, and socketserver prints that traceback to sys.stderr whenever it happens, often during a later
test on the same worker, whose captured stderr it then corrupts (seen once: a one-line-error test got 22 lines).
Such hang-ups are counted in ``hangups``; any other handler error is printed as before."""

from __future__ import annotations

import sys
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
