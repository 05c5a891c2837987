"""A tune beside a live service: measured only while the service serves nobody.

The deploy tunes a host that may already serve clients (a re-tune after a model or build change). Its figures are
ratios of servers measured side by side on the same CPU or GPU; a client's request on the live service meanwhile
takes compute from some of them and not others, and the ratios would describe the traffic. So, as the speed gate
does: wait (bounded) for the service's slots to be idle, watch its ``/slots`` for the whole tune, and call the result
unproven when a request ran meanwhile — never a choice made from contended measurements.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from specops import keyfile
from specops.client import LlamaServerClient, ServerError


def read_key(path: Path | None) -> str:
    """The key the tune sends: the first of an API key file, read as llama-server reads it (specops.keyfile: one
    per line as written, empty lines and # lines skipped); '' without a file or a key."""
    return "" if path is None else keyfile.first_key(path)


def busy_slots(client: LlamaServerClient, timeout: float = 5.0) -> int | None:
    """How many of the service's slots process a request now; None when /slots does not answer (stopped, or
    started without --slots)."""
    try:
        slots = client.slots(timeout=timeout)
    except (httpx.HTTPError, ServerError):
        return None
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))


def wait_idle(client: LlamaServerClient, budget_s: float, interval: float = 0.5) -> tuple[bool, float]:
    """Wait up to ``budget_s`` for no busy slot (or a service that does not answer: nothing to contend with).
    Returns (idle, seconds waited)."""
    start = time.monotonic()
    while True:
        if busy_slots(client) in (0, None):
            return True, time.monotonic() - start
        if time.monotonic() - start >= budget_s:
            return False, time.monotonic() - start
        time.sleep(interval)


@dataclass
class Watch:
    """Polls the service's /slots in a thread while the tune runs: how often it was seen busy, and when first."""

    client: LlamaServerClient
    interval: float = 0.5
    polls: int = 0
    busy: int = 0
    blind: int = 0  # polls /slots did not answer
    first_busy_s: float | None = None  # seconds into the tune
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _start: float = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            n = busy_slots(self.client)
            self.polls += 1
            if n is None:
                self.blind += 1
            elif n > 0:
                self.busy += 1
                if self.first_busy_s is None:
                    self.first_busy_s = time.monotonic() - self._start
            self._stop.wait(self.interval)

    def __enter__(self) -> Watch:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="tune-quiet-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def contended(self) -> str:
        """Why the tune's figures cannot stand ('' when the service stayed idle throughout)."""
        if not self.busy:
            return ""
        return (f"the service at {self.client.base_url} served a request during the tune (seen busy in {self.busy} "
                f"of {self.polls} looks at /slots, first {self.first_busy_s or 0:.0f} s in): its figures would "
                "describe that traffic")

    def blind_note(self) -> str:
        if not self.blind:
            return ""
        return (f"the service at {self.client.base_url} did not answer /slots in {self.blind} of {self.polls} "
                "looks: requests then would not have been seen")
