"""prometheus-client custom collector: metric families from the scraper's latest snapshot.

``collect()`` never talks to llama-server; it only formats the last :class:`Snapshot`, so any number of
Prometheus servers may scrape the exporter without adding load on llama-server. Every family is built from its
entry in the series catalogue (:mod:`specops.exporter.series`: name, type, labels, help), which the exporter
role's README lists.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from specops.exporter.llama_metrics import PER_POS_NAME, SPEC_KEYS
from specops.exporter.series import COUNTER, HISTOGRAM, INFO, SERIES
from specops.exporter.speedgate import STATES as SPEED_GATE_STATES
from specops.exporter.speedgate import SpeedGateFile, Tune
from specops.exporter.state import Scraper, Snapshot


def _family(name: str, window: float | None = None, level: str | None = None, from_log: bool = False) -> Metric:
    """The empty family of the catalogue's series ``name`` (a KeyError for a series it does not declare), its help's
    placeholders filled in."""
    s = SERIES[name]
    help_ = s.text(window, level, from_log)
    labels = list(s.labels) or None
    if s.type == COUNTER:
        return CounterMetricFamily(s.family, help_, labels=labels)
    if s.type == INFO:
        return InfoMetricFamily(s.family, help_)
    if s.type == HISTOGRAM:
        return HistogramMetricFamily(s.family, help_, labels=labels)
    return GaugeMetricFamily(s.family, help_, labels=labels)


def _gauge(name: str, value: float | None, window: float | None = None, level: str | None = None) -> Metric | None:
    """The series ``name`` with one unlabelled sample, or None for no value."""
    if value is None:
        return None
    g = _family(name, window, level)
    g.add_metric([], value)
    return g


def _counter(name: str, value: float, from_log: bool = False) -> Metric:
    c = _family(name, from_log=from_log)
    c.add_metric([], value)
    return c


def _info(name: str, labels: dict[str, str]) -> Metric:
    info = _family(name)
    info.add_metric([], labels)
    return info


def server_info_labels(s: Snapshot) -> dict[str, str]:
    """The info series' labels: always the same set, 'unknown' for what is not known."""
    def known(value: str, absent: str = "unknown") -> str:
        return value or absent

    launch_absent = "default" if s.launch_known else "unknown"  # read, and the flag was not given
    return {
        "build_commit": known(s.props.build_commit or s.install_commit[:9]),
        "build_number": known(s.props.build_number),
        "backend": known(s.backend),
        "target_model": known(s.props.model or s.launch.target_model),
        "draft_model": known(s.launch.draft_model, "none" if s.launch_known else "unknown"),
        "spec_type": s.speculation.spec_type,
        "draft_n_max": known(s.launch.draft_n_max, launch_absent),
        "draft_n_min": known(s.launch.draft_n_min, launch_absent),
        "spec_source": s.known_spec_source,
        # the placement over devices (issue 81): the target's devices and split, the draft's devices
        "device": known(s.launch.device, launch_absent),
        "tensor_split": known(s.launch.tensor_split, launch_absent),
        "draft_device": known(s.launch.draft_device, launch_absent),
    }


def _positive(value: float | None) -> float | None:
    """A figure worth exporting: above 0 (the reader has already refused what is not a finite number >= 0)."""
    return value if value is not None and value > 0 else None


def tune_series(tune: Tune | None) -> Iterator[Metric | None]:
    """The deploy's auto-tune, from an ok speed-gate record (whatever the gate's verdict): its choice and figures."""
    if tune is None:
        return
    yield _info("specops_tune_info", tune.labels)
    n = tune.numbers
    yield _gauge("specops_tune_draft_n_max", n.get("draft_n_max"))
    estimate = _positive(n.get("speedup_estimate"))
    yield _gauge("specops_tune_measured_speedup", estimate)
    if estimate is not None:
        yield _gauge("specops_tune_measured_speedup_low", _positive(n.get("speedup_low")))
        yield _gauge("specops_tune_measured_speedup_high", _positive(n.get("speedup_high")))
    yield _gauge("specops_tune_predicted_speedup", _positive(n.get("predicted")))


def live_prediction(tune: Tune | None, s: Snapshot, now: float) -> Iterator[Metric | None]:
    """The tuned profile's speedup predicted on the live traffic (:mod:`specops.tune.live`) and, where the record keeps
    one, its prediction band for the window's n requests (:mod:`specops.tune.band`): only while the record keeps a
    model, the server speculates and the window holds generated tokens; absent otherwise, never 0 (plain decoding
    served has no live acceptance to price)."""
    if tune is None or tune.live is None or not s.speculation_expected:
        return
    run = s.window.run
    if not s.window.live(now) or run is None:
        return
    value = _positive(tune.live.predict(run))
    yield _gauge("specops_tune_live_predicted_speedup", value)
    if value is None or tune.band is None:
        return
    band = tune.band
    low, high = band.edges(run.n_tokens)
    yield _gauge("specops_tune_live_window_requests", band.window_requests(run.n_tokens))
    for edge, figure in (("low", low), ("high", high)):
        yield _gauge(f"specops_tune_live_band_{edge}", figure, level=_level(band.level))
    yield _gauge("specops_tune_live_predicted_speedup_upper", band.upper(value, run.n_tokens),
                 level=_level(band.windows.level))


def _level(level: float) -> str:
    """A level as a series' help says it: 95%, 99%, 99.5%."""
    return f"{level:.1%}".replace(".0%", "%")


class SpecopsCollector(Collector):
    def __init__(self, scraper: Scraper) -> None:
        self.scraper = scraper
        self.speed_gate = SpeedGateFile(scraper.cfg.speed_gate_file, scraper.cfg.speed_gate_unit_dirs)

    def collect(self) -> Iterator[Metric]:
        snap = self.scraper.snapshot
        for part in (self._server, self._speculation, self._process, self._speed_gate, self._exporter):
            for metric in part(snap):
                if metric is not None:
                    yield metric

    # ---- the deploy's speed gate ---------------------------------------------------------------
    def _speed_gate(self, s: Snapshot) -> Iterator[Metric | None]:
        if not self.speed_gate.path:
            return
        reading = self.speed_gate.check()
        g = _family("specops_speed_gate_record_state")
        for state in SPEED_GATE_STATES:
            g.add_metric([state], 1.0 if reading.state == state else 0.0)
        yield g
        yield from tune_series(reading.tune)  # the tune's figures stand on their own, whatever the gate's verdict
        yield from live_prediction(reading.tune, s, self.scraper.clocks.monotonic())
        if reading.gate is None:
            return
        n = reading.gate.numbers
        yield _gauge("specops_speed_gate_plain_decode_tokens_per_second", n["plain_tps"])
        yield _gauge("specops_speed_gate_speculative_decode_tokens_per_second", n["speculative_tps"])
        yield _gauge("specops_speed_gate_ratio", n.get("ratio"))
        yield _gauge("specops_speed_gate_break_even_acceptance", n.get("break_even_acceptance"))
        yield _gauge("specops_speed_gate_timestamp_seconds", reading.gate.mtime)
        yield _info("specops_speed_gate_info", reading.gate.labels)

    # ---- llama-server ------------------------------------------------------------------------
    def _server(self, s: Snapshot) -> Iterator[Metric | None]:
        yield _gauge("llamacpp_up", float(s.up))
        yield _gauge("llamacpp_healthy", float(s.healthy))
        yield _gauge("llamacpp_exporter_auth_refused", float(s.auth_refused))
        yield _info("llamacpp_server_info", server_info_labels(s))
        yield self._unsupported()
        yield _gauge("llamacpp_speculation_state_known", float(s.speculation.known))
        if s.speculation.known:
            yield _gauge("llamacpp_speculation_expected", float(s.speculation_expected))
        if s.metrics is not None:
            for name, value in s.metrics.counters.items():
                if name in SPEC_KEYS:
                    continue  # emitted with their source below
                yield _counter(name, value)
            for name, value in s.metrics.gauges.items():
                yield _gauge(name, value)
        if s.slots is not None:
            yield _gauge("llamacpp_slots", float(s.slots.total))
            yield _gauge("llamacpp_slots_busy", float(s.slots.busy))
            yield _gauge("llamacpp_slots_speculative", float(s.slots.speculative))

    def _unsupported(self) -> Metric | None:
        engine = self.scraper.engine
        if not engine.unsupported:
            return None
        g = _family("llamacpp_exporter_unsupported_series")
        for series, reason in engine.unsupported:
            g.add_metric([engine.name, series, reason], 1.0)
        return g

    def _speculation(self, s: Snapshot) -> Iterator[Metric | None]:
        for name, value in s.spec_counters().items():
            yield _counter(name, value, from_log=s.spec_source != "metrics")
        if s.metrics is not None and s.metrics.accepted_per_pos:
            c = _family(PER_POS_NAME)
            for pos, value in sorted(s.metrics.accepted_per_pos.items()):
                c.add_metric([str(pos)], value)
            yield c
        if s.log is not None:
            yield _counter("llamacpp_log_acceptance_lines_total", float(s.log.lines))
        w = s.window
        if not w.live(self.scraper.clocks.monotonic()):
            return  # no two good passes within twice the window: no number rather than a stale one
        window = self.scraper.cfg.window
        yield _gauge("llamacpp_spec_acceptance_ratio", w.acceptance_ratio, window)
        yield _gauge("llamacpp_spec_mean_acceptance_length", w.mean_acceptance_length, window)
        if w.acceptance_by_position:
            g = _family("llamacpp_spec_acceptance_by_position_ratio", window)
            for pos, value in sorted(w.acceptance_by_position.items()):
                g.add_metric([str(pos)], value)
            yield g
        yield _gauge("llamacpp_decode_tokens_per_second", w.decode_tokens_per_second, window)

    # ---- the llama-server process ------------------------------------------------------------
    def _process(self, s: Snapshot) -> Iterator[Metric | None]:
        yield _counter("llamacpp_server_restarts_total", float(s.restarts))
        if s.pid_info is not None and s.pid_info.systemd_restarts is not None:
            yield _counter("llamacpp_systemd_restarts_total", float(s.pid_info.systemd_restarts))
        if s.pid_info is not None and s.pid_info.memory_max_bytes is not None:
            yield _gauge("llamacpp_systemd_memory_max_bytes", float(s.pid_info.memory_max_bytes))
        p = s.process
        if p is not None:
            yield _gauge("llamacpp_process_resident_memory_bytes", float(p.rss_bytes))
            yield _gauge("llamacpp_process_virtual_memory_bytes", float(p.vms_bytes))
            if p.anon_bytes is not None:
                yield _gauge("llamacpp_process_anonymous_memory_bytes", float(p.anon_bytes))
            yield _counter("llamacpp_process_cpu_seconds_total", p.cpu_seconds)
            yield _gauge("llamacpp_process_threads", float(p.threads))
            if p.open_fds is not None:
                yield _gauge("llamacpp_process_open_fds", float(p.open_fds))
            yield _gauge("llamacpp_process_start_time_seconds", p.start_time)
        if s.gpu is not None:
            yield _gauge("llamacpp_gpu_monitoring", 1.0)
            if s.gpu:
                g = _family("llamacpp_process_gpu_memory_bytes")
                per_gpu: dict[str, float] = {}
                for row in s.gpu:
                    per_gpu[row.gpu_uuid] = per_gpu.get(row.gpu_uuid, 0.0) + row.used_bytes
                for uuid, used in sorted(per_gpu.items()):
                    g.add_metric([uuid], used)
                yield g

    # ---- the exporter itself -----------------------------------------------------------------
    def _exporter(self, s: Snapshot) -> Iterator[Metric | None]:
        errors, durations, cycles = self.scraper.selfm.copy()
        c = _family("specops_exporter_scrape_errors_total")
        for (endpoint, kind), n in sorted(errors.items()):
            c.add_metric([endpoint, kind], float(n))
        yield c
        h = _family("specops_exporter_scrape_duration_seconds")
        for endpoint, (buckets, total) in sorted(durations.items()):
            h.add_metric([endpoint], buckets, total)
        yield h
        yield _counter("specops_exporter_scrape_cycles_total", float(cycles))
        if s.time:
            yield _gauge("specops_exporter_last_scrape_timestamp_seconds", s.time)
        yield _gauge("llamacpp_exporter_last_success_timestamp_seconds", s.last_success)
        yield _gauge("specops_exporter_interval_seconds", self.scraper.cfg.interval)
