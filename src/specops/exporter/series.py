"""Every series the exporter can emit, declared once: its name, type, labels and help.

The collector (:mod:`specops.exporter.collector`) builds each metric family from its entry here and from nowhere
else (an undeclared name is a KeyError), and roles/exporter/README.md's series table is written from this catalogue
(``specops exporter-series --update``; tests/unit/test_exporter_series.py fails when it is stale, and when a
golden exposition holds a series, a label or a help text the catalogue does not). The server's own series keep
their declarations where the engines map them (:data:`specops.exporter.engine.HELP`: one exported name and help
for both engines; the per-position counter in :mod:`specops.exporter.llama_metrics`); the rest are declared here.

Names are as Prometheus sees them: a counter's with ``_total``, an info series' with ``_info``, a histogram's base
name (with ``_bucket``, ``_sum`` and ``_count``). A help text may hold ``<window>`` (the exporter's ``--window`` in
seconds) or ``<level>`` (the prediction band's level, as the speed-gate record keeps it): filled in when the
family is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from specops.exporter.engine import HELP, LLAMA_CPP, SPEC_KEYS, engine_named
from specops.exporter.llama_metrics import PER_POS_HELP, PER_POS_NAME

GAUGE, COUNTER, INFO, HISTOGRAM = "gauge", "counter", "info", "histogram"
TYPES = (GAUGE, COUNTER, INFO, HISTOGRAM)
WINDOW, LEVEL = "<window>", "<level>"


@dataclass(frozen=True)
class Series:
    name: str  # as exposed: a counter's with _total, an info series' with _info
    type: str  # one of TYPES
    help: str
    labels: tuple[str, ...] = ()  # an info series': its labels; a histogram's without le
    group: str = ""  # the README table's section
    log_help: str | None = None  # the help when the figure comes from the server's log (a speculative counter)

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"series {self.name}: type {self.type!r} is none of {', '.join(TYPES)}")
        suffix = {COUNTER: "_total", INFO: "_info"}.get(self.type)
        if suffix and not self.name.endswith(suffix):
            raise ValueError(f"series {self.name}: a {self.type}'s name ends in {suffix}")

    @property
    def family(self) -> str:
        """The name prometheus-client's family takes (it adds ``_total`` and ``_info`` itself)."""
        return self.name.removesuffix({COUNTER: "_total", INFO: "_info"}.get(self.type, "\0"))

    def text(self, window: float | None = None, level: str | None = None, from_log: bool = False) -> str:
        """The help, from the log where ``from_log`` (and it has a log help), placeholders filled in."""
        out = self.log_help if from_log and self.log_help else self.help
        if window is not None:
            out = out.replace(WINDOW, f"{window:g}")
        return out.replace(LEVEL, level) if level is not None else out


SERVER, SPECULATION, PROCESS, SPEED_GATE, TUNE, EXPORTER, CLIENT = (
    "llama-server", "speculation", "the llama-server process", "the deploy's speed gate", "the deploy's tune",
    "the exporter itself", "the exporter's own process (prometheus-client's ProcessCollector)")
GROUPS = (SERVER, SPECULATION, PROCESS, SPEED_GATE, TUNE, EXPORTER, CLIENT)

_LLAMA = engine_named(LLAMA_CPP)
_SERVER_COUNTERS = frozenset(_LLAMA.counters.values())
_SPEC_LOG_HELP = {
    "llamacpp_spec_draft_tokens_total": "Speculative: draft tokens generated (from the server log).",
    "llamacpp_spec_accepted_tokens_total": "Speculative: draft tokens accepted (from the server log).",
    "llamacpp_spec_drafts_total": "Speculative: verification steps, recovered from 'mean len' in the log.",
}
_WINDOW = (f"over the exporter's window ({WINDOW}s) of consecutive good passes; absent while llama-server is down or "
           "answers invalid counters")
_OK_RECORD = "(only while specops_speed_gate_record_state{state=\"ok\"} is 1)"
SERVER_INFO_LABELS = ("build_commit", "build_number", "backend", "target_model", "draft_model", "spec_type",
                      "draft_n_max", "draft_n_min", "spec_source", "device", "tensor_split", "draft_device")
TUNE_INFO_LABELS = ("chosen", "spec_type", "when", "tasks", "mix", "reused")
SPEED_GATE_INFO_LABELS = ("verdict", "action", "serving", "spec_type", "mode", "measured_at", "build_id")


def _engine(name: str) -> Series:
    """A server series the engines map (:data:`specops.exporter.engine.HELP`)."""
    kind = COUNTER if name in _SERVER_COUNTERS else GAUGE
    return Series(name, kind, HELP[name], group=SPECULATION if name in SPEC_KEYS else SERVER,
                  log_help=_SPEC_LOG_HELP.get(name))


_SERVER: tuple[Series, ...] = (
    Series("llamacpp_up", GAUGE, "1 when the exporter could read the server: its last pass read llama-server's "
           "/metrics whole. 0: down, an HTTP error, a body that is garbage, cut short or has duplicated series, or "
           "the server refused the exporter's API key (then llamacpp_exporter_auth_refused is 1 and llamacpp_healthy "
           "says whether the server is up)."),
    Series("llamacpp_healthy", GAUGE, "1 when llama-server's /health said ok."),
    Series("llamacpp_exporter_auth_refused", GAUGE, "1 when llama-server answered the exporter's last /metrics "
           "request with HTTP 401 or 403: a wrong or missing API key (--api-key-file). llamacpp_up is then 0 whether "
           "or not the server is up; alert SpecopsExporterCannotAuthenticate, not LlamaServerDown."),
    Series("llamacpp_server_info", INFO, "llama-server build, models and speculation settings. Always the same "
           "labels; a value not known (yet) is 'unknown', and values once known are kept through failed reads, so "
           "the series does not churn.", SERVER_INFO_LABELS),
    Series("llamacpp_exporter_unsupported_series", GAUGE, "1 for each exporter series this engine cannot give: it "
           "is absent (never 0) for instances of this engine, and the dashboard's panels for it stay empty.",
           ("engine", "series", "reason")),
    Series("llamacpp_speculation_state_known", GAUGE, "1 when the exporter knows whether llama-server is meant to "
           "speculate (from its command line, else from /slots); 0 when it does not (then "
           "llamacpp_speculation_expected is absent)."),
    Series("llamacpp_speculation_expected", GAUGE, "1 when llama-server is configured to speculate, 0 when it is "
           "configured not to (command line first, else /slots). Absent while unknown: see "
           "llamacpp_speculation_state_known."),
    *(_engine(name) for name in HELP if name not in SPEC_KEYS),
    Series("llamacpp_slots", GAUGE, "Slots configured (from /slots)."),
    Series("llamacpp_slots_busy", GAUGE, "Slots processing a request."),
    Series("llamacpp_slots_speculative", GAUGE, "Slots with speculation enabled."),
)
_SPECULATION: tuple[Series, ...] = (
    *(_engine(name) for name in SPEC_KEYS),
    Series(PER_POS_NAME, COUNTER, PER_POS_HELP, ("position",)),
    Series("llamacpp_log_acceptance_lines_total", COUNTER, "Acceptance log lines parsed."),
    Series("llamacpp_spec_acceptance_ratio", GAUGE, f"Accepted / drafted tokens {_WINDOW}."),
    Series("llamacpp_spec_mean_acceptance_length", GAUGE, f"1 + accepted tokens / verification steps {_WINDOW}."),
    Series("llamacpp_spec_acceptance_by_position_ratio", GAUGE,
           f"Share of verification steps accepting draft position N {_WINDOW}.", ("position",)),
    Series("llamacpp_decode_tokens_per_second", GAUGE, f"Generated tokens per second of generation time {_WINDOW}."),
)
_PROCESS: tuple[Series, ...] = (
    Series("llamacpp_server_restarts_total", COUNTER, "llama-server restarts seen by this exporter (PID change, or "
           "counter reset when no PID is known)."),
    Series("llamacpp_systemd_restarts_total", COUNTER, "NRestarts of the llama-server unit."),
    Series("llamacpp_systemd_memory_max_bytes", GAUGE, "MemoryMax= of the llama-server unit."),
    Series("llamacpp_process_resident_memory_bytes", GAUGE, "llama-server resident memory."),
    Series("llamacpp_process_virtual_memory_bytes", GAUGE, "llama-server virtual memory."),
    Series("llamacpp_process_anonymous_memory_bytes", GAUGE, "llama-server resident memory not backed by files "
           "(heap, KV and prompt caches; excludes the mmapped model weights). Leaks show here."),
    Series("llamacpp_process_cpu_seconds_total", COUNTER, "llama-server user + system CPU time."),
    Series("llamacpp_process_threads", GAUGE, "llama-server threads."),
    Series("llamacpp_process_open_fds", GAUGE, "llama-server open file descriptors."),
    Series("llamacpp_process_start_time_seconds", GAUGE, "llama-server start time (Unix time)."),
    Series("llamacpp_gpu_monitoring", GAUGE, "1 when nvidia-smi answered for this host."),
    Series("llamacpp_process_gpu_memory_bytes", GAUGE, "GPU memory used by llama-server (nvidia-smi).",
           ("gpu_uuid",)),
)
_SPEED_GATE: tuple[Series, ...] = (
    Series("specops_speed_gate_record_state", GAUGE, "The deploy's speed-gate record (--speed-gate-file), one-hot: "
           "ok (a valid record for the systemd unit on disk: unit_file and installed_unit_sha256 match), missing (no "
           "file), invalid (unreadable, not JSON, not a record: the exporter's log says why), stale (it names no "
           "unit, or its unit file cannot be read or has changed since). The specops_speed_gate_* figures exist only "
           "for an ok record of a measured verdict (pays, loses). Fix: re-run the deploy; it rewrites the record.",
           ("state",)),
    Series("specops_speed_gate_plain_decode_tokens_per_second", GAUGE, "Plain decoding (no speculation) of this "
           "build on this host, measured by the deploy's speed gate: the figure speculation must beat."),
    Series("specops_speed_gate_speculative_decode_tokens_per_second", GAUGE, "The speculative setting on the same "
           "probes, measured by the deploy's speed gate."),
    Series("specops_speed_gate_ratio", GAUGE, "Speculative / plain decode speed at the deploy's speed gate."),
    Series("specops_speed_gate_break_even_acceptance", GAUGE, "Draft acceptance at which speculation matches plain "
           "decoding on this host (from the speed gate's measured round cost; above 1: no acceptance can pay)."),
    Series("specops_speed_gate_timestamp_seconds", GAUGE, "When the speed-gate record was written (file mtime)."),
    Series("specops_speed_gate_info", INFO, f"The deploy's speed gate: verdict and what the host serves {_OK_RECORD}.",
           SPEED_GATE_INFO_LABELS),
)
_TUNE: tuple[Series, ...] = (
    Series("specops_tune_info", INFO, "The deploy's auto-tune (llama_server_tune: auto): the profile it chose, its "
           "spec type, when it tuned, whether this deploy reused that result, the tasks it measured on (file names "
           "and hashes, never prompts) and the traffic mix it chose for (from the speed-gate record; only while "
           "specops_speed_gate_record_state{state=\"ok\"} is 1).", TUNE_INFO_LABELS),
    Series("specops_tune_draft_n_max", GAUGE, "The draft length of the tune's chosen profile (absent when it sets "
           "none: plain decoding, an n-gram type without one)."),
    Series("specops_tune_measured_speedup", GAUGE, "The tune's chosen profile against plain decoding on this host, "
           "measured by the tune (decode speed ratio; absent when it measured none)."),
    Series("specops_tune_measured_speedup_low", GAUGE, "Lower end of the interval of specops_tune_measured_speedup "
           "(absent without one)."),
    Series("specops_tune_measured_speedup_high", GAUGE, "Upper end of the interval of specops_tune_measured_speedup "
           "(absent without one)."),
    Series("specops_tune_predicted_speedup", GAUGE, "The speedup over plain decoding the tune predicted for its "
           "chosen profile before measuring."),
    Series("specops_tune_live_predicted_speedup", GAUGE, "The tuned profile's speedup over plain decoding predicted "
           "on the live traffic: the tune's cost model on the live speculation counters over the exporter's window, "
           "with what the model left unexplained of the tune's measurement put on each round (on the tune's own "
           "requests it reads specops_tune_measured_speedup; traffic that drafts nothing reads 1). Absent while "
           "plain decoding is served, without traffic in the window, or without a model in the speed-gate record."),
    Series("specops_tune_live_window_requests", GAUGE, "The exporter's window in the tune's requests: its generated "
           "tokens over a tune request's mean tokens (llama-server counts no requests; a long live request counts as "
           "several), the n of specops_tune_live_band_low/high."),
    *(Series(f"specops_tune_live_band_{edge}", GAUGE, f"{edge.capitalize()} end of the {LEVEL} prediction band for a "
             "window of n requests (n: specops_tune_live_window_requests): where specops_tune_live_predicted_speedup "
             "reads on windows of n new requests of the tune's kinds drawn at its shares (a window's own mix drawn "
             "too). Not a confidence interval: wide for few requests, narrowing with n toward the tune's figure, so "
             "a lasting move to one workload reads outside. Absent with the live prediction, or without a band in "
             "the record.")
      for edge in ("low", "high")),
    Series("specops_tune_live_predicted_speedup_upper", GAUGE, f"The most the live traffic's own speedup can be at "
           f"{LEVEL}, given specops_tune_live_predicted_speedup over a window of n requests: the live prediction over "
           "the lowest a window of n of the tune's requests reads against their whole figure. Below 1: the live "
           "traffic confidently loses; traffic that drafts nothing reads at least 1."),
)
_EXPORTER: tuple[Series, ...] = (
    Series("specops_exporter_scrape_errors_total", COUNTER, "Failed scrapes of llama-server by endpoint and kind.",
           ("endpoint", "kind")),
    Series("specops_exporter_scrape_duration_seconds", HISTOGRAM, "Time to scrape one llama-server endpoint.",
           ("endpoint",)),
    Series("specops_exporter_scrape_cycles_total", COUNTER, "Scrape passes over llama-server."),
    Series("specops_exporter_last_scrape_timestamp_seconds", GAUGE,
           "When the last pass over llama-server finished (Unix time)."),
    Series("llamacpp_exporter_last_success_timestamp_seconds", GAUGE, "When a pass last read llama-server's /metrics "
           "whole (Unix time; absent before the first): time() minus this is how stale the server's series would be."),
    Series("specops_exporter_interval_seconds", GAUGE, "Seconds between passes over llama-server."),
)
# the exporter's own process, by prometheus-client (specops.exporter.app registers its ProcessCollector); Linux only
_CLIENT: tuple[Series, ...] = (
    Series("process_virtual_memory_bytes", GAUGE, "Virtual memory size in bytes."),
    Series("process_resident_memory_bytes", GAUGE, "Resident memory size in bytes."),
    Series("process_start_time_seconds", GAUGE, "Start time of the process since unix epoch in seconds."),
    Series("process_cpu_seconds_total", COUNTER, "Total user and system CPU time spent in seconds."),
    Series("process_open_fds", GAUGE, "Number of open file descriptors."),
    Series("process_max_fds", GAUGE, "Maximum number of open file descriptors."),
)


def _grouped(group: str, series: tuple[Series, ...]) -> tuple[Series, ...]:
    return tuple(s if s.group else Series(s.name, s.type, s.help, s.labels, group, s.log_help) for s in series)


CATALOGUE: tuple[Series, ...] = (
    *_grouped(SERVER, _SERVER), *_grouped(SPECULATION, _SPECULATION), *_grouped(PROCESS, _PROCESS),
    *_grouped(SPEED_GATE, _SPEED_GATE), *_grouped(TUNE, _TUNE), *_grouped(EXPORTER, _EXPORTER),
    *_grouped(CLIENT, _CLIENT),
)
SERIES: dict[str, Series] = {s.name: s for s in CATALOGUE}
# the series specops.exporter.collector builds (the others come from prometheus-client's ProcessCollector)
COLLECTED = tuple(s.name for s in CATALOGUE if s.group != CLIENT)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _readme_help(s: Series) -> str:
    out = s.text().replace(WINDOW, "W").replace(LEVEL, "L")
    if s.log_help:
        out += f" From the server's log instead (`--log-journal`, `--log-file`): {s.log_help}"
    return _cell(out)


def markdown_table() -> str:
    """roles/exporter/README.md's series table (between its ``exporter-series`` markers): one row per series, a
    section row per group."""
    lines = ["| series | type | labels | help |", "| --- | --- | --- | --- |"]
    for group in GROUPS:
        lines.append(f"| **{group}** | | | |")
        for s in (s for s in CATALOGUE if s.group == group):
            labels = ", ".join(f"`{name}`" for name in s.labels)
            lines.append(f"| `{s.name}` | {s.type} | {labels} | {_readme_help(s)} |")
    lines += ["", f"{len(CATALOGUE)} series. W: the exporter's window in seconds (`--window`, `exporter_window`); "
                  "L: a level as the speed-gate record keeps it (the tune writes 95% for the band, 99% for the upper "
                  "end). A "
                  "histogram is exposed as `_bucket` (with `le`), `_sum` and `_count`; an info series' value is "
                  "always 1."]
    return "\n".join(lines) + "\n"
