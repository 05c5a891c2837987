"""Background sampling of the server process and the exporter: PID, RSS, restarts, exporter up.

The PID comes from the exporter's PID sources (systemd unit, listening port, fixed PID). llama-server's
own ``/metrics`` is never read here: every GET of it resets its rate gauges for the real scraper.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from specops.client import metric_value, parse_metrics
from specops.exporter.process import PidSource, ProcessError, read_process
from specops.soak.trend import RssSample

log = logging.getLogger(__name__)

EXPORTER_VALUES = {
    "llamacpp_up": "llamacpp_up",
    "acceptance": "llamacpp_spec_acceptance_ratio",
    "draft_tokens_total": "llamacpp_spec_draft_tokens_total",
    "accepted_tokens_total": "llamacpp_spec_accepted_tokens_total",
    "rss_bytes": "llamacpp_process_resident_memory_bytes",
    "gpu_memory_bytes": "llamacpp_process_gpu_memory_bytes",
}


@dataclass(frozen=True)
class PidChange:
    t: float
    old: int | None
    new: int | None


@dataclass(frozen=True)
class ExporterSample:
    t: float
    up: bool
    error: str | None = None
    values: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def exporter_metrics_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/metrics") else url + "/metrics"


def scrape_exporter(http: httpx.Client, url: str, t: float) -> ExporterSample:
    try:
        resp = http.get(url)
        if resp.status_code != 200:
            return ExporterSample(t, False, f"HTTP {resp.status_code}")
        samples = parse_metrics(resp.text)
    except (httpx.HTTPError, ValueError) as exc:
        return ExporterSample(t, False, f"{type(exc).__name__}: {str(exc)[:120]}")
    values: dict[str, float] = {}
    for key, name in EXPORTER_VALUES.items():
        v = metric_value(samples, name)
        if v is not None:
            values[key] = v
    return ExporterSample(t, True, None, values)


class Sampler:
    """Polls every ``interval`` seconds in a daemon thread; ``sample_once`` is the unit of work."""

    def __init__(self, pid_source: PidSource | None, clock: Callable[[], float], interval: float = 5.0,
                 exporter_url: str | None = None, exporter_timeout: float = 5.0) -> None:
        self.pid_source = pid_source
        self.clock = clock
        self.interval = interval
        self.exporter_url = exporter_metrics_url(exporter_url) if exporter_url else None
        self._http = httpx.Client(timeout=exporter_timeout) if exporter_url else None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pid: int | None = None
        self.rss: list[RssSample] = []
        self.cmdline: tuple[str, ...] = ()  # of the last server process sampled
        self.pid_changes: list[PidChange] = []
        self.nrestarts: list[tuple[float, int]] = []
        self.exporter: list[ExporterSample] = []
        self.errors: list[tuple[float, str]] = []

    def current_pid(self, refresh: bool = False) -> int | None:
        if refresh:
            self._sample_pid(self.clock())
        with self._lock:
            return self.pid

    def _sample_pid(self, t: float) -> None:
        if self.pid_source is None:
            return
        try:
            info = self.pid_source.find()
        except ProcessError as exc:
            with self._lock:
                self.errors.append((t, str(exc)))
            return
        with self._lock:
            if info.pid != self.pid:
                if self.pid is not None or info.pid is not None:
                    self.pid_changes.append(PidChange(t, self.pid, info.pid))
                self.pid = info.pid
            if info.systemd_restarts is not None and (
                not self.nrestarts or self.nrestarts[-1][1] != info.systemd_restarts
            ):
                self.nrestarts.append((t, info.systemd_restarts))

    def sample_once(self) -> None:
        t = self.clock()
        self._sample_pid(t)
        pid = self.current_pid()
        if pid is not None:
            try:
                stats = read_process(pid)
            except ProcessError as exc:
                if exc.kind != "gone":  # a restart between the two reads is normal
                    with self._lock:
                        self.errors.append((t, str(exc)))
                if self.pid_source is not None:
                    self.pid_source.forget()
            else:
                with self._lock:
                    self.rss.append(RssSample(t, pid, stats.rss_bytes, stats.anon_bytes))
                    if stats.cmdline:
                        self.cmdline = stats.cmdline
        if self._http is not None and self.exporter_url is not None:
            sample = scrape_exporter(self._http, self.exporter_url, t)
            with self._lock:
                self.exporter.append(sample)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # the sampler must not die silently mid-run
                log.exception("sampler error")
                with self._lock:
                    self.errors.append((self.clock(), f"{type(exc).__name__}: {exc}"))
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self.sample_once()  # one last sample after the load stopped
        if self._http:
            self._http.close()
