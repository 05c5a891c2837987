"""The scraper: one pass over llama-server and its process → an immutable :class:`Snapshot`."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specops.exporter.clocks import Clocks
from specops.exporter.config import ExporterConfig
from specops.exporter.derived import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    PREDICTED,
    DerivedSeries,
    WindowFigures,
    pass_values,
)
from specops.exporter.engine import Engine, engine_named, other_engine
from specops.exporter.fetch import BoundedFetcher, FetchError
from specops.exporter.gpu import GpuError, GpuProcessMemory, find_nvidia_smi, query_compute_apps
from specops.exporter.llama_metrics import ServerMetrics, parse_server_metrics
from specops.exporter.logline import LogAcceptance, LogCounters
from specops.exporter.process import (
    FixedPid,
    LaunchSettings,
    PidInfo,
    PidSource,
    PortPid,
    ProcessError,
    ProcessStats,
    SystemdPid,
    build_info_for,
    parse_launch,
    read_process,
)
from specops.exporter.props import Props, parse_props
from specops.exporter.selfmetrics import SelfMetrics
from specops.exporter.slots import ShapeError, SlotsSummary, summarize_slots
from specops.exporter.speculation import ON, Speculation, SpeculationTracker

log = logging.getLogger("specops.exporter")

RESET_WITNESSES = (PREDICTED, "llamacpp_decode_calls_total", "llamacpp_prompt_tokens_total")
MIN_LOOP_SECONDS = 0.05  # the loop never spins, whatever interval it is given (the CLI requires >= 1 s)


@dataclass(frozen=True)
class Snapshot:
    time: float = 0.0
    up: bool = False
    healthy: bool = False
    auth_refused: bool = False  # /metrics answered 401/403 on this pass: the exporter's API key was refused
    metrics: ServerMetrics | None = None
    slots: SlotsSummary | None = None
    props: Props = field(default_factory=Props)
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    launch_known: bool = False  # the command line was read at least once
    backend: str = ""
    install_commit: str = ""
    pid_info: PidInfo | None = None
    process: ProcessStats | None = None
    restarts: int = 0
    window: WindowFigures = field(default_factory=WindowFigures)
    gpu: tuple[GpuProcessMemory, ...] | None = None  # None: no nvidia-smi
    log: LogCounters | None = None  # None: no log source
    spec_source: str = "none"  # this pass: metrics | log | none
    known_spec_source: str = "unknown"  # the last pass that read /metrics said so (for the info series)
    speculation: Speculation = field(default_factory=Speculation)
    last_success: float | None = None  # Unix time of the last pass that read /metrics whole

    @property
    def speculation_expected(self) -> bool:
        return self.speculation.state == ON

    @property
    def spec_type(self) -> str:
        return self.speculation.spec_type

    def spec_counters(self) -> dict[str, float]:
        """The speculative counters from their source (server metrics or the log)."""
        if self.spec_source == "metrics" and self.metrics:
            keys = (DRAFT_TOKENS, ACCEPTED, DRAFTS)
            return {k: self.metrics.counters[k] for k in keys if k in self.metrics.spec_keys}
        if self.spec_source == "log" and self.log:
            return {DRAFT_TOKENS: float(self.log.generated), ACCEPTED: float(self.log.accepted),
                    DRAFTS: float(self.log.drafts)}
        return {}


def make_pid_source(cfg: ExporterConfig) -> PidSource | None:
    if cfg.unit:
        return SystemdPid(cfg.unit, fallback_port=cfg.server_port)
    if cfg.pid:
        return FixedPid(cfg.pid)
    if cfg.pid_from_port:
        return PortPid(cfg.server_port)
    return None


class Scraper:
    """Owns every contact with llama-server. ``scrape_once()`` is called by one thread only."""

    def __init__(self, cfg: ExporterConfig, log_acceptance: LogAcceptance | None = None,
                 pid_source: PidSource | None = None, fetcher: BoundedFetcher | None = None,
                 clocks: Clocks | None = None) -> None:
        self.cfg = cfg
        self.engine: Engine = engine_named(cfg.engine)
        self.clocks = clocks or Clocks()
        self.fetcher = fetcher or BoundedFetcher(cfg.server_url, cfg.timeout, cfg.max_body_bytes, cfg.api_key)
        self.pid_source = pid_source if pid_source is not None else make_pid_source(cfg)
        self.log_acceptance = log_acceptance
        self.nvidia_smi = find_nvidia_smi(cfg.nvidia_smi)
        self.selfm = SelfMetrics(self.clocks.monotonic)
        self.derived = DerivedSeries(cfg.window)
        self.speculation = SpeculationTracker()
        self._snapshot = Snapshot()
        self._snap_lock = threading.Lock()
        self._identity: tuple[int, float] | None = None
        self._restarts = 0
        self._props = Props()
        self._props_due = 0.0  # monotonic time; 0 = now
        self._was_up = False
        self._prev_counters: dict[str, float] = {}
        self._launch = LaunchSettings()
        self._launch_known = False
        self._known_spec_source = "unknown"
        self._last_success: float | None = None
        self._build: tuple[str, str] = ("", "")
        self._build_read_for: tuple[int, float] | str | None = "never"
        self._gpu: tuple[GpuProcessMemory, ...] | None = None
        self._gpu_due = 0.0
        self._metrics_clean = False
        self._metrics_error = ""  # the error kind of this pass's /metrics ("" when it was read)

    @property
    def snapshot(self) -> Snapshot:
        with self._snap_lock:
            return self._snapshot

    def close(self) -> None:
        self.fetcher.close()

    # ---- one endpoint at a time --------------------------------------------------------------
    def _get(self, endpoint: str, path: str, accept_status: tuple[int, ...] = ()) -> Any:
        t0 = self.clocks.perf()
        try:
            resp = self.fetcher.get(path, accept_status)
            return resp
        finally:
            self.selfm.observe(endpoint, self.clocks.perf() - t0)

    def _health(self) -> bool:
        try:
            resp = self._get("health", "/health", accept_status=(503,))
            data = resp.json()
            if not isinstance(data, dict):
                raise FetchError("shape", f"/health: expected an object, got {type(data).__name__}")
        except FetchError as exc:
            self.selfm.error("health", exc.kind, str(exc))
            return False
        status = data.get("status")
        if resp.status == 200 and status == self.engine.healthy_status:
            self.selfm.ok("health")
            return True
        self.selfm.condition("health", f"status:{str(status)[:20]}", f"/health says {str(data)[:120]}")
        return False

    def _metrics(self) -> ServerMetrics | None:
        """The parsed body, or None when it is unusable; ``_metrics_clean`` says whether no error was counted
        for it (the pass reports ``ok`` only after the derived series have checked its counters too)."""
        self._metrics_clean = False
        self._metrics_error = ""
        try:
            text = self._get("metrics", "/metrics").text()
        except FetchError as exc:
            self._metrics_error = exc.kind
            self.selfm.error("metrics", exc.kind, str(exc))
            return None
        parsed = parse_server_metrics(text, self.engine)
        if parsed.empty:
            other = other_engine(text, self.engine)
            hint = f" (these are {other}'s: run the exporter with --engine {other})" if other else ""
            self.selfm.error("metrics", "shape", f"/metrics: no {self.engine.name} series in {text[:80]!r}{hint}")
            return None
        if parsed.truncated or parsed.duplicates:
            why = "body cut short" if parsed.truncated else f"{parsed.duplicates} duplicated series"
            self.selfm.error("metrics", "invalid", f"/metrics: {why}: the body is not one consistent answer")
            return None
        if parsed.bad_lines:
            self.selfm.error("metrics", "parse", f"/metrics: {parsed.bad_lines} unparseable line(s)")
        elif parsed.invalid_values:
            self.selfm.error("metrics", "invalid_value", f"/metrics: {parsed.invalid_values} NaN, infinite or "
                             f"negative value(s): {', '.join(parsed.invalid_examples)}")
        else:
            self._metrics_clean = True
        return parsed

    def _slots(self) -> SlotsSummary | None:
        try:
            summary = summarize_slots(self._get("slots", "/slots").json())
        except FetchError as exc:
            self.selfm.error("slots", exc.kind, str(exc))
            return None
        except ShapeError as exc:
            self.selfm.error("slots", "shape", str(exc))
            return None
        self.selfm.ok("slots")
        return summary

    def _maybe_props(self, now: float) -> None:
        if now < self._props_due or not self.engine.props:
            return
        try:
            self._props = parse_props(self._get("props", "/props").json())
            self.selfm.ok("props")
            self._props_due = float("inf")  # until the next (re)start
        except FetchError as exc:
            self.selfm.error("props", exc.kind, str(exc))
            self._props_due = now + self.cfg.props_retry
        except ShapeError as exc:
            self.selfm.error("props", "shape", str(exc))
            self._props_due = now + self.cfg.props_retry

    def _process(self) -> tuple[PidInfo | None, ProcessStats | None]:
        if self.pid_source is None:
            return None, None
        t0 = self.clocks.perf()
        try:
            info = self.pid_source.find()
            systemd_error = getattr(self.pid_source, "last_error", None)
            if systemd_error:  # PID from the fallback; counted and logged once, not fatal
                self.selfm.error("process", "systemctl", systemd_error)
            if info.pid is None:
                self.selfm.error("process", "not_found", f"{self.pid_source.describe()}: no llama-server PID")
                return info, None
            stats = read_process(info.pid)
            if not systemd_error:
                self.selfm.ok("process")
            return info, stats
        except ProcessError as exc:
            kind = exc.kind if exc.kind in ("gone", "access_denied", "systemctl") else "other"
            self.selfm.error("process", kind, str(exc))
            self.pid_source.forget()
            return None, None
        finally:
            self.selfm.observe("process", self.clocks.perf() - t0)

    def _maybe_build_info(self, stats: ProcessStats | None) -> None:
        identity = (stats.pid, stats.start_time) if stats else None
        if self._build_read_for == identity:
            return
        self._build_read_for = identity
        path = Path(self.cfg.build_info_path) if self.cfg.build_info_path else (
            build_info_for(stats.cmdline) if stats else None)
        if path is None:
            return
        try:
            data = json.loads(path.read_text()[: 1 << 20])
            backend = data.get("backend") if isinstance(data, dict) else None
            commit = data.get("commit") if isinstance(data, dict) else None
            self._build = (str(backend)[:40] if backend else "", str(commit)[:40] if commit else "")
        except (OSError, ValueError, RecursionError) as exc:
            if self.cfg.build_info_path:  # only an explicitly configured file is worth an error
                self.selfm.error("build_info", "error", f"{path}: {exc}")

    def _maybe_gpu(self, now: float) -> None:
        if self.nvidia_smi is None or now < self._gpu_due:
            return
        self._gpu_due = now + self.cfg.gpu_interval
        t0 = self.clocks.perf()
        try:
            self._gpu = tuple(query_compute_apps(self.nvidia_smi, timeout=max(self.cfg.timeout, 5.0)))
            self.selfm.ok("gpu")
        except GpuError as exc:
            self.selfm.error("gpu", "error", str(exc))
            self._gpu = None
        finally:
            self.selfm.observe("gpu", self.clocks.perf() - t0)

    # ---- the pass ----------------------------------------------------------------------------
    def scrape_once(self) -> Snapshot:
        now = self.clocks.monotonic()
        pid_info, stats = self._process()
        restarted = False
        if stats is not None:
            identity = (stats.pid, stats.start_time)
            if self._identity is not None and identity != self._identity:
                restarted = True
            self._identity = identity
            if stats.cmdline and self.engine.llama_argv:
                self._launch, self._launch_known = parse_launch(stats.cmdline), True
        if self.engine.llama_argv:
            self._maybe_build_info(stats)

        healthy = self._health()
        metrics = self._metrics()
        up = metrics is not None
        slots = self._slots() if (up or healthy) and self.engine.slots else None

        if metrics is not None and stats is None and self._prev_counters and any(
            metrics.counters.get(k, 0.0) < self._prev_counters.get(k, 0.0)
            for k in RESET_WITNESSES if k in self._prev_counters
        ):
            restarted = True  # no PID to watch: a counter going down is the restart signal
        if restarted:
            self._restarts += 1
            self._props_due = 0.0
            log.info("llama-server restarted (restarts observed: %d)", self._restarts)
        if up and not self._was_up:
            self._props_due = min(self._props_due, now)
        self._was_up = up
        if up:
            self._maybe_props(now)
            self._prev_counters = dict(metrics.counters) if metrics else {}
        self._maybe_gpu(now)

        log_counters = self.log_acceptance.snapshot() if self.log_acceptance else None
        if metrics is not None and metrics.has_spec_counters:
            spec_source = "metrics"
        elif log_counters is not None:
            spec_source = "log"
        else:
            spec_source = "none"
        wall = self.clocks.wall()
        if up:
            self._known_spec_source = spec_source
            self._last_success = wall
        gpu = tuple(g for g in self._gpu if stats and g.pid == stats.pid) if self._gpu is not None else None
        snap = Snapshot(
            time=wall, up=up, healthy=healthy, auth_refused=self._metrics_error == "auth",
            metrics=metrics if up else None, slots=slots,
            props=self._props, launch=self._launch, launch_known=self._launch_known, backend=self._build[0],
            install_commit=self._build[1], pid_info=pid_info, process=stats, restarts=self._restarts, gpu=gpu,
            log=log_counters, spec_source=spec_source, known_spec_source=self._known_spec_source,
            speculation=self.speculation.update(self._launch, slots, restarted), last_success=self._last_success,
        )
        values = pass_values(snap.metrics, snap.spec_counters(), spec_source)
        window, refused = self.derived.update(now, values, spec_source, restarted)
        snap = replace(snap, window=window)
        # counters that contradict each other: counted, and no figure from them (a refused pass: none at all;
        # per-position counters against the accepted total: no per-position figure)
        if refused is not None:
            self.selfm.error("metrics", "invalid_value", f"/metrics: counters contradict each other: {refused}")
        elif self._metrics_clean:
            self.selfm.ok("metrics")
        with self.selfm._lock:
            self.selfm.cycles += 1
        with self._snap_lock:
            self._snapshot = snap
        return snap

    # ---- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Scrape every ``interval`` seconds until ``stop`` is set. Never raises."""
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                self.scrape_once()
            except Exception:  # a bug must not stop the exporter from serving
                log.exception("scrape pass failed")
            next_at += max(self.cfg.interval, MIN_LOOP_SECONDS)
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow server): skip missed ticks, keep one GET per interval
                next_at = time.monotonic()
                delay = 0
            stop.wait(delay)
