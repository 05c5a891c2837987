"""prometheus-client custom collector: metric families from the scraper's latest snapshot.

``collect()`` never talks to llama-server; it only formats the last :class:`Snapshot`, so any number of
Prometheus servers may scrape the exporter without adding load on llama-server.
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

from specops.exporter.llama_metrics import COUNTERS, GAUGES, PER_POS_HELP, PER_POS_NAME, SPEC_KEYS
from specops.exporter.speedgate import STATES as SPEED_GATE_STATES
from specops.exporter.speedgate import SpeedGateFile, Tune
from specops.exporter.state import Scraper, Snapshot

_HELP = {name: help_ for name, help_ in (*COUNTERS.values(), *GAUGES.values())}
_SPEC_LOG_HELP = {
    "llamacpp_spec_draft_tokens_total": "Speculative: draft tokens generated (from the server log).",
    "llamacpp_spec_accepted_tokens_total": "Speculative: draft tokens accepted (from the server log).",
    "llamacpp_spec_drafts_total": "Speculative: verification steps, recovered from 'mean len' in the log.",
}


def _gauge(name: str, help_: str, value: float | None, labels: dict[str, str] | None = None) -> Metric | None:
    if value is None:
        return None
    g = GaugeMetricFamily(name, help_, labels=list(labels) if labels else None)
    g.add_metric(list(labels.values()) if labels else [], value)
    return g


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
    }


def _positive(value: float | None) -> float | None:
    """A figure worth exporting: above 0 (the reader has already refused what is not a finite number >= 0)."""
    return value if value is not None and value > 0 else None


def tune_series(tune: Tune | None) -> Iterator[Metric | None]:
    """The deploy's auto-tune, from an ok speed-gate record (whatever the gate's verdict): its choice and figures."""
    if tune is None:
        return
    info = InfoMetricFamily("specops_tune", "The deploy's auto-tune (llama_server_tune: auto): the profile it chose, "
                            "its spec type, when it tuned, whether this deploy reused that result, the tasks it "
                            "measured on (file names and hashes, never prompts) and the traffic mix it chose for "
                            "(from the speed-gate record; only while "
                            "specops_speed_gate_record_state{state=\"ok\"} is 1).")
    info.add_metric([], tune.labels)
    yield info
    n = tune.numbers
    yield _gauge("specops_tune_draft_n_max", "The draft length of the tune's chosen profile (absent when it sets "
                 "none: plain decoding, an n-gram type without one).", n.get("draft_n_max"))
    estimate = _positive(n.get("speedup_estimate"))
    yield _gauge("specops_tune_measured_speedup", "The tune's chosen profile against plain decoding on this host, "
                 "measured by the tune (decode speed ratio; absent when it measured none).", estimate)
    if estimate is not None:
        yield _gauge("specops_tune_measured_speedup_low", "Lower end of the interval of "
                     "specops_tune_measured_speedup (absent without one).", _positive(n.get("speedup_low")))
        yield _gauge("specops_tune_measured_speedup_high", "Upper end of the interval of "
                     "specops_tune_measured_speedup (absent without one).", _positive(n.get("speedup_high")))
    yield _gauge("specops_tune_predicted_speedup", "The speedup over plain decoding the tune predicted for its chosen "
                 "profile before measuring.", _positive(n.get("predicted")))


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
    yield _gauge("specops_tune_live_predicted_speedup",
                 "The tuned profile's speedup over plain decoding predicted on the live traffic: the tune's cost "
                 "model on the live speculation counters over the exporter's window, with what the model left "
                 "unexplained of the tune's measurement put on each round (on the tune's own requests it reads "
                 "specops_tune_measured_speedup; traffic that drafts nothing reads 1). Absent while plain decoding "
                 "is served, without traffic in the window, or without a model in the speed-gate record.", value)
    if value is None or tune.band is None:
        return
    band = tune.band
    low, high = band.edges(run.n_tokens)
    level = f"{band.level:.1%}".replace(".0%", "%")
    n = band.window_requests(run.n_tokens)
    yield _gauge("specops_tune_live_window_requests",
                 "The exporter's window in the tune's requests: its generated tokens over a tune request's mean "
                 "tokens (llama-server counts no requests; a long live request counts as several), the n of "
                 "specops_tune_live_band_low/high.", n)
    for edge, figure in (("low", low), ("high", high)):
        yield _gauge(f"specops_tune_live_band_{edge}",
                     f"{edge.capitalize()} end of the {level} prediction band for a window of n requests "
                     "(n: specops_tune_live_window_requests): where specops_tune_live_predicted_speedup reads on "
                     "windows of n new requests of the tune's kinds, at its shares or of any one of its workloads "
                     "alone (the window's mix is not known live). Not a confidence interval: wide for few requests, "
                     "narrowing with n. Absent with the live prediction, or without a band in the record.", figure)
    yield _gauge("specops_tune_live_predicted_speedup_upper",
                 f"The most the live traffic's own speedup can be at {level}, given "
                 "specops_tune_live_predicted_speedup over a window of n requests: the live prediction over the "
                 "lowest a window of n of the tune's requests reads against their whole figure. Below 1: the live "
                 "traffic confidently loses; traffic that drafts nothing reads at least 1.",
                 band.upper(value, run.n_tokens))


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
        g = GaugeMetricFamily("specops_speed_gate_record_state",
                              "The deploy's speed-gate record (--speed-gate-file), one-hot: ok (a valid record for "
                              "the systemd unit on disk: unit_file and installed_unit_sha256 match), missing (no "
                              "file), invalid (unreadable, not JSON, not a record: the exporter's log says why), "
                              "stale (it names no unit, or its unit file cannot be read or has changed since). "
                              "The specops_speed_gate_* figures exist only for an ok record of a measured verdict "
                              "(pays, loses). Fix: re-run the deploy; it rewrites the record.",
                              labels=["state"])
        for state in SPEED_GATE_STATES:
            g.add_metric([state], 1.0 if reading.state == state else 0.0)
        yield g
        yield from tune_series(reading.tune)  # the tune's figures stand on their own, whatever the gate's verdict
        yield from live_prediction(reading.tune, s, self.scraper.clocks.monotonic())
        if reading.gate is None:
            return
        n = reading.gate.numbers
        yield _gauge("specops_speed_gate_plain_decode_tokens_per_second",
                     "Plain decoding (no speculation) of this build on this host, measured by the deploy's speed "
                     "gate: the figure speculation must beat.", n["plain_tps"])
        yield _gauge("specops_speed_gate_speculative_decode_tokens_per_second",
                     "The speculative setting on the same probes, measured by the deploy's speed gate.",
                     n["speculative_tps"])
        yield _gauge("specops_speed_gate_ratio", "Speculative / plain decode speed at the deploy's speed gate.",
                     n.get("ratio"))
        yield _gauge("specops_speed_gate_break_even_acceptance",
                     "Draft acceptance at which speculation matches plain decoding on this host (from the speed "
                     "gate's measured round cost; above 1: no acceptance can pay).", n.get("break_even_acceptance"))
        yield _gauge("specops_speed_gate_timestamp_seconds", "When the speed-gate record was written (file mtime).",
                     reading.gate.mtime)
        info = InfoMetricFamily("specops_speed_gate", "The deploy's speed gate: verdict and what the host serves "
                                "(only while specops_speed_gate_record_state{state=\"ok\"} is 1).")
        info.add_metric([], reading.gate.labels)
        yield info

    # ---- llama-server ------------------------------------------------------------------------
    def _server(self, s: Snapshot) -> Iterator[Metric | None]:
        yield _gauge("llamacpp_up", "1 when the exporter could read the server: its last pass read llama-server's "
                     "/metrics whole. 0: down, an HTTP error, a body that is garbage, cut short or has duplicated "
                     "series, or the server refused the exporter's API key (then "
                     "llamacpp_exporter_auth_refused is 1 and llamacpp_healthy says whether the server is up).",
                     float(s.up))
        yield _gauge("llamacpp_healthy", "1 when llama-server's /health said ok.", float(s.healthy))
        yield _gauge("llamacpp_exporter_auth_refused",
                     "1 when llama-server answered the exporter's last /metrics request with HTTP 401 or 403: a "
                     "wrong or missing API key (--api-key-file). llamacpp_up is then 0 whether or not the server is "
                     "up; alert SpecopsExporterCannotAuthenticate, not LlamaServerDown.", float(s.auth_refused))
        info = InfoMetricFamily("llamacpp_server", "llama-server build, models and speculation settings. Always "
                                "the same labels; a value not known (yet) is 'unknown', and values once known "
                                "are kept through failed reads, so the series does not churn.")
        info.add_metric([], server_info_labels(s))
        yield info
        yield self._unsupported()
        yield _gauge("llamacpp_speculation_state_known",
                     "1 when the exporter knows whether llama-server is meant to speculate (from its command "
                     "line, else from /slots); 0 when it does not (then llamacpp_speculation_expected is absent).",
                     float(s.speculation.known))
        if s.speculation.known:
            yield _gauge("llamacpp_speculation_expected",
                         "1 when llama-server is configured to speculate, 0 when it is configured not to (command "
                         "line first, else /slots). Absent while unknown: see llamacpp_speculation_state_known.",
                         float(s.speculation_expected))
        if s.metrics is not None:
            for name, value in s.metrics.counters.items():
                if name in SPEC_KEYS:
                    continue  # emitted with their source below
                c = CounterMetricFamily(name.removesuffix("_total"), _HELP[name])
                c.add_metric([], value)
                yield c
            for name, value in s.metrics.gauges.items():
                yield _gauge(name, _HELP[name], value)
        if s.slots is not None:
            yield _gauge("llamacpp_slots", "Slots configured (from /slots).", float(s.slots.total))
            yield _gauge("llamacpp_slots_busy", "Slots processing a request.", float(s.slots.busy))
            yield _gauge("llamacpp_slots_speculative", "Slots with speculation enabled.",
                         float(s.slots.speculative))

    def _unsupported(self) -> Metric | None:
        engine = self.scraper.engine
        if not engine.unsupported:
            return None
        g = GaugeMetricFamily("llamacpp_exporter_unsupported_series",
                              "1 for each exporter series this engine cannot give: it is absent (never 0) for "
                              "instances of this engine, and the dashboard's panels for it stay empty.",
                              labels=["engine", "series", "reason"])
        for series, reason in engine.unsupported:
            g.add_metric([engine.name, series, reason], 1.0)
        return g

    def _speculation(self, s: Snapshot) -> Iterator[Metric | None]:
        for name, value in s.spec_counters().items():
            help_ = _HELP[name] if s.spec_source == "metrics" else _SPEC_LOG_HELP[name]
            c = CounterMetricFamily(name.removesuffix("_total"), help_)
            c.add_metric([], value)
            yield c
        if s.metrics is not None and s.metrics.accepted_per_pos:
            c = CounterMetricFamily(PER_POS_NAME.removesuffix("_total"), PER_POS_HELP, labels=["position"])
            for pos, value in sorted(s.metrics.accepted_per_pos.items()):
                c.add_metric([str(pos)], value)
            yield c
        if s.log is not None:
            c = CounterMetricFamily("llamacpp_log_acceptance_lines", "Acceptance log lines parsed.")
            c.add_metric([], float(s.log.lines))
            yield c
        w = s.window
        if not w.live(self.scraper.clocks.monotonic()):
            return  # no two good passes within twice the window: no number rather than a stale one
        window = (f"over the exporter's window ({self.scraper.cfg.window:g}s) of consecutive good passes; "
                  "absent while llama-server is down or answers invalid counters")
        yield _gauge("llamacpp_spec_acceptance_ratio", f"Accepted / drafted tokens {window}.",
                     w.acceptance_ratio)
        yield _gauge("llamacpp_spec_mean_acceptance_length",
                     f"1 + accepted tokens / verification steps {window}.", w.mean_acceptance_length)
        if w.acceptance_by_position:
            g = GaugeMetricFamily("llamacpp_spec_acceptance_by_position_ratio",
                                  f"Share of verification steps accepting draft position N {window}.",
                                  labels=["position"])
            for pos, value in sorted(w.acceptance_by_position.items()):
                g.add_metric([str(pos)], value)
            yield g
        yield _gauge("llamacpp_decode_tokens_per_second",
                     f"Generated tokens per second of generation time {window}.", w.decode_tokens_per_second)

    # ---- the llama-server process ------------------------------------------------------------
    def _process(self, s: Snapshot) -> Iterator[Metric | None]:
        c = CounterMetricFamily("llamacpp_server_restarts",
                                "llama-server restarts seen by this exporter (PID change, or counter reset "
                                "when no PID is known).")
        c.add_metric([], float(s.restarts))
        yield c
        if s.pid_info is not None and s.pid_info.systemd_restarts is not None:
            c = CounterMetricFamily("llamacpp_systemd_restarts", "NRestarts of the llama-server unit.")
            c.add_metric([], float(s.pid_info.systemd_restarts))
            yield c
        if s.pid_info is not None and s.pid_info.memory_max_bytes is not None:
            yield _gauge("llamacpp_systemd_memory_max_bytes", "MemoryMax= of the llama-server unit.",
                         float(s.pid_info.memory_max_bytes))
        p = s.process
        if p is not None:
            yield _gauge("llamacpp_process_resident_memory_bytes", "llama-server resident memory.",
                         float(p.rss_bytes))
            yield _gauge("llamacpp_process_virtual_memory_bytes", "llama-server virtual memory.",
                         float(p.vms_bytes))
            if p.anon_bytes is not None:
                yield _gauge("llamacpp_process_anonymous_memory_bytes",
                             "llama-server resident memory not backed by files (heap, KV and prompt caches; "
                             "excludes the mmapped model weights). Leaks show here.", float(p.anon_bytes))
            c = CounterMetricFamily("llamacpp_process_cpu_seconds", "llama-server user + system CPU time.")
            c.add_metric([], p.cpu_seconds)
            yield c
            yield _gauge("llamacpp_process_threads", "llama-server threads.", float(p.threads))
            if p.open_fds is not None:
                yield _gauge("llamacpp_process_open_fds", "llama-server open file descriptors.",
                             float(p.open_fds))
            yield _gauge("llamacpp_process_start_time_seconds", "llama-server start time (Unix time).",
                         p.start_time)
        if s.gpu is not None:
            yield _gauge("llamacpp_gpu_monitoring", "1 when nvidia-smi answered for this host.", 1.0)
            if s.gpu:
                g = GaugeMetricFamily("llamacpp_process_gpu_memory_bytes",
                                      "GPU memory used by llama-server (nvidia-smi).", labels=["gpu_uuid"])
                per_gpu: dict[str, float] = {}
                for row in s.gpu:
                    per_gpu[row.gpu_uuid] = per_gpu.get(row.gpu_uuid, 0.0) + row.used_bytes
                for uuid, used in sorted(per_gpu.items()):
                    g.add_metric([uuid], used)
                yield g

    # ---- the exporter itself -----------------------------------------------------------------
    def _exporter(self, s: Snapshot) -> Iterator[Metric | None]:
        errors, durations, cycles = self.scraper.selfm.copy()
        c = CounterMetricFamily("specops_exporter_scrape_errors",
                                "Failed scrapes of llama-server by endpoint and kind.",
                                labels=["endpoint", "kind"])
        for (endpoint, kind), n in sorted(errors.items()):
            c.add_metric([endpoint, kind], float(n))
        yield c
        h = HistogramMetricFamily("specops_exporter_scrape_duration_seconds",
                                  "Time to scrape one llama-server endpoint.", labels=["endpoint"])
        for endpoint, (buckets, total) in sorted(durations.items()):
            h.add_metric([endpoint], buckets, total)
        yield h
        c = CounterMetricFamily("specops_exporter_scrape_cycles", "Scrape passes over llama-server.")
        c.add_metric([], float(cycles))
        yield c
        if s.time:
            yield _gauge("specops_exporter_last_scrape_timestamp_seconds",
                         "When the last pass over llama-server finished (Unix time).", s.time)
        yield _gauge("llamacpp_exporter_last_success_timestamp_seconds",
                     "When a pass last read llama-server's /metrics whole (Unix time; absent before the first): "
                     "time() minus this is how stale the server's series would be.", s.last_success)
        yield _gauge("specops_exporter_interval_seconds", "Seconds between passes over llama-server.",
                     self.scraper.cfg.interval)
