#!/usr/bin/env python3
"""Generate ``dashboards/specops-llama-server.json`` (Grafana) from the panel list below.

Run ``python3 configs/grafana/build_dashboard.py`` after editing; a unit test checks the committed JSON is
current and an integration test runs every panel's PromQL against a real Prometheus. Standard library only.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "specops-llama-server.json"
UID = "specops-llama-server"
SEL = 'instance=~"$instance"'
DS = {"type": "prometheus", "uid": "${datasource}"}
# Panels built on series that TabbyAPI cannot give (llamacpp_exporter_unsupported_series) say so when empty.
NOT_ON_TABBY = "No data (TabbyAPI cannot give this: see the table 'Series this engine cannot give')"
# A figure of the deploy's auto-tune, labelled with the info's choice (specops_tune_info: chosen, spec_type, when,
# reused), as the stat panel "Tuned profile" and the morning report (specops report) show it.
TUNE_INFO = f"* on(instance, job) group_left(chosen, spec_type, when, reused) specops_tune_info{{{SEL}}}"


@dataclass
class Panel:
    title: str
    targets: list[tuple[str, str]]  # (expr, legend)
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 8
    height: int = 8
    description: str = ""
    instant: bool = False
    no_value: str = ""  # text shown when the panel has no data
    extra: dict = field(default_factory=dict)


ROWS: list[tuple[str, list[Panel]]] = [
    ("At a glance", [
        Panel("llama-server up", [(f"llamacpp_up{{{SEL}}}", "{{instance}}")], "stat", width=4, height=4,
              description="1 when the exporter could read llama-server's /metrics on its last pass. 0 with Healthy "
              "1: often a refused API key (llamacpp_exporter_auth_refused, alert SpecopsExporterCannotAuthenticate)."),
        Panel("Healthy", [(f"llamacpp_healthy{{{SEL}}}", "{{instance}}")], "stat", width=4, height=4,
              description="/health said ok."),
        Panel("Restarts in range",
              [(f"increase(llamacpp_systemd_restarts_total{{{SEL}}}[$__range]) "
                f"or increase(llamacpp_server_restarts_total{{{SEL}}}[$__range])", "{{instance}}")],
              "stat", width=4, height=4,
              description="systemd NRestarts when the exporter knows the unit, else PID changes it saw."),
        Panel("Draft acceptance (5m)", [(f"instance:llamacpp_spec_acceptance_ratio:rate5m{{{SEL}}}",
                                         "{{instance}}")], "stat", unit="percentunit", width=4, height=4),
        Panel("Mean acceptance length (5m)",
              [(f"instance:llamacpp_spec_mean_acceptance_length:rate5m{{{SEL}}}", "{{instance}}")],
              "stat", width=4, height=4, description="Tokens per verification step (1 + accepted/drafts).",
              no_value="n/a on TabbyAPI"),
        Panel("Decode tokens/s (5m)",
              [(f"instance:llamacpp_decode_tokens_per_second:rate5m{{{SEL}}}", "{{instance}}")],
              "stat", width=4, height=4),
    ]),
    ("Fleet", [
        Panel("llama.cpp builds serving",
              [(f"count(count by (build_commit) (llamacpp_server_info{{{SEL}}}))", "builds")], "stat", width=4,
              height=6,
              description="Distinct llama.cpp builds among the selected hosts: 1 except during a rolling upgrade. "
              "Alert LlamaCppVersionSkew fires when more than one (of those the exporter can tell) serve for 30 "
              "minutes, longer than a rollout takes."),
        Panel("Hosts per build", [(f"count by (build_commit, build_number) (llamacpp_server_info{{{SEL}}})", "")],
              "table", width=6, height=6, instant=True),
        Panel("Decode tokens/s by host (5m)",
              [(f"instance:llamacpp_decode_tokens_per_second:rate5m{{{SEL}}}", "{{instance}}")], "bargauge",
              width=7, height=6),
        Panel("Draft acceptance by host (5m)",
              [(f"instance:llamacpp_spec_acceptance_ratio:rate5m{{{SEL}}}", "{{instance}}")], "bargauge",
              unit="percentunit", width=7, height=6),
    ]),
    ("Speculation", [
        Panel("Draft acceptance vs this host's break-even",
              [(f"instance:llamacpp_spec_acceptance_ratio:rate5m{{{SEL}}}", "{{instance}}"),
               (f"specops_speed_gate_break_even_acceptance{{{SEL}}}", "{{instance}} break-even")],
              unit="percentunit", description="Accepted / drafted tokens over 5m. The break-even comes from the "
              "deploy's speed gate on each host (its measured round cost): below it speculation is slower than "
              "plain decoding there."),
        Panel("Mean acceptance length",
              [(f"instance:llamacpp_spec_mean_acceptance_length:rate5m{{{SEL}}}", "{{instance}}")],
              no_value=NOT_ON_TABBY),
        Panel("Acceptance by draft position",
              [(f"instance_position:llamacpp_spec_acceptance_by_position:rate5m{{{SEL}}}",
                "{{instance}} pos {{position}}")], unit="percentunit",
              description="Share of verification steps that accepted draft position N.", no_value=NOT_ON_TABBY),
        Panel("Draft tokens, accepted tokens and verification steps /s",
              [(f"rate(llamacpp_spec_draft_tokens_total{{{SEL}}}[$__rate_interval])", "{{instance}} drafted"),
               (f"rate(llamacpp_spec_accepted_tokens_total{{{SEL}}}[$__rate_interval])",
                "{{instance}} accepted"),
               (f"rate(llamacpp_spec_drafts_total{{{SEL}}}[$__rate_interval])", "{{instance}} steps")],
              width=12, description="TabbyAPI gives drafted and accepted tokens but no verification steps."),
        Panel("Speculation configured / active slots",
              [(f"llamacpp_speculation_expected{{{SEL}}}", "{{instance}} expected"),
               (f"llamacpp_slots_speculative{{{SEL}}}", "{{instance}} speculative slots")], width=12,
              description="expected is absent while the exporter does not know (always on TabbyAPI: no command "
              "line it can read, no /slots).", no_value=NOT_ON_TABBY),
    ]),
    ("Throughput and requests", [
        Panel("Decode speed vs plain decoding on this host",
              [(f"instance:llamacpp_decode_tokens_per_second:rate5m{{{SEL}}}", "{{instance}}"),
               (f"specops_speed_gate_plain_decode_tokens_per_second{{{SEL}}}", "{{instance}} plain (speed gate)")],
              description="Tokens per second of generation. The second line is plain decoding of the same build "
              "on the same host, measured by the deploy's speed gate: speculation that stays below it loses."),
        Panel("Throughput (tokens per wall-clock second)",
              [(f"instance:llamacpp_tokens_predicted:rate5m{{{SEL}}}", "{{instance}} generated"),
               (f"instance:llamacpp_prompt_tokens:rate5m{{{SEL}}}", "{{instance}} prompt")]),
        Panel("Requests",
              [(f"llamacpp_requests_processing{{{SEL}}}", "{{instance}} processing"),
               (f"llamacpp_requests_deferred{{{SEL}}}", "{{instance}} deferred")]),
        Panel("Slots",
              [(f"llamacpp_slots{{{SEL}}}", "{{instance}} total"),
               (f"llamacpp_slots_busy{{{SEL}}}", "{{instance}} busy")], width=12, no_value=NOT_ON_TABBY),
        Panel("Prompt cache reuse /s",
              [(f"rate(llamacpp_prompt_tokens_cached_total{{{SEL}}}[$__rate_interval])", "{{instance}}")],
              width=12),
    ]),
    ("Process", [
        Panel("Resident memory", [(f"llamacpp_process_resident_memory_bytes{{{SEL}}}", "{{instance}} RSS"),
                                  (f"llamacpp_process_anonymous_memory_bytes{{{SEL}}}", "{{instance}} anonymous")],
              unit="bytes",
              description="RSS includes the mmapped model weights, which page in over time; a leak shows in "
                          "anonymous memory (heap, KV and prompt caches, bounded by --cache-ram)."),
        Panel("GPU memory (nvidia-smi)",
              [(f"llamacpp_process_gpu_memory_bytes{{{SEL}}}", "{{instance}} {{gpu_uuid}}")], unit="bytes",
              description="Only on hosts with nvidia-smi."),
        Panel("CPU", [(f"rate(llamacpp_process_cpu_seconds_total{{{SEL}}}[$__rate_interval])",
                       "{{instance}} cores")]),
        Panel("Threads and open files",
              [(f"llamacpp_process_threads{{{SEL}}}", "{{instance}} threads"),
               (f"llamacpp_process_open_fds{{{SEL}}}", "{{instance}} open fds")]),
        Panel("Restarts",
              [(f"llamacpp_systemd_restarts_total{{{SEL}}} or llamacpp_server_restarts_total{{{SEL}}}",
                "{{instance}}")]),
        Panel("Uptime", [(f"time() - llamacpp_process_start_time_seconds{{{SEL}}}", "{{instance}}")],
              unit="s"),
    ]),
    ("Exporter", [
        Panel("Exporter up", [(f'up{{job="specops-exporter",{SEL}}}', "{{instance}}")], width=6),
        Panel("Scrape errors /s by endpoint and kind",
              [(f"sum by (instance, endpoint, kind) "
                f"(rate(specops_exporter_scrape_errors_total{{{SEL}}}[$__rate_interval]))",
                "{{instance}} {{endpoint}} {{kind}}")], width=9),
        Panel("Scrape duration p99 by endpoint",
              [(f"histogram_quantile(0.99, sum by (instance, endpoint, le) "
                f"(rate(specops_exporter_scrape_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                "{{instance}} {{endpoint}}")], unit="s", width=9),
        Panel("Seconds since the exporter last read llama-server whole",
              [(f"time() - llamacpp_exporter_last_success_timestamp_seconds{{{SEL}}}", "{{instance}}")],
              unit="s", width=12,
              description="Staleness: how old the server's series are. Grows while llama-server is down or answers "
              "errors (its derived gauges are then absent, not stale); a few scrape intervals when healthy."),
        Panel("Speculation state known",
              [(f"llamacpp_speculation_state_known{{{SEL}}}", "{{instance}} known"),
               (f"llamacpp_speculation_expected{{{SEL}}}", "{{instance}} expected")], width=12,
              description="known 1: the exporter knows whether the server is meant to speculate (command line "
              "first, else /slots); 0: unknown (expected is then absent, never exported as off). Alert "
              "SpeculationStateUnknown fires after 10 minutes of 0."),
        Panel("Speed-gate record",
              [(f"specops_speed_gate_record_state{{{SEL}}} == 1", "{{instance}} {{state}}")], "table", width=12,
              height=6, instant=True,
              no_value="No record: the llama-server deploy writes it (--speed-gate-file); TabbyAPI has none",
              description="The deploy's speed-gate record per host: ok (written for the systemd unit that runs now), "
              "missing, invalid (the exporter's journal says why) or stale (the unit changed since, or the record "
              "names none). The speed-gate lines in the panels above exist only while it is ok and the gate "
              "measured (pays or loses). Not ok: re-run the deploy; it rewrites the record "
              "(alert SpecopsSpeedGateRecordBad after 15 minutes)."),
        Panel("Tuned profile",
              [(f"specops_tune_draft_n_max{{{SEL}}} {TUNE_INFO}", "{{instance}} {{chosen}} draft length"),
               (f"specops_tune_measured_speedup{{{SEL}}} {TUNE_INFO}", "{{instance}} {{chosen}} measured speedup"),
               (f"specops_tune_measured_speedup_low{{{SEL}}} {TUNE_INFO}", "{{instance}} {{chosen}} speedup low"),
               (f"specops_tune_measured_speedup_high{{{SEL}}} {TUNE_INFO}", "{{instance}} {{chosen}} speedup high"),
               (f"avg_over_time(specops_tune_live_predicted_speedup{{{SEL}}}[$__range]) {TUNE_INFO}",
                "{{instance}} {{chosen}} live traffic predicts (mean over the range)")],
              "stat", width=12, height=6,
              no_value="No tune: the deploy's auto-tune did not run here (llama_server_tune off, or explicit "
              "settings), or the speed-gate record is not ok; TabbyAPI has none",
              description="The profile the deploy's auto-tune (llama_server_tune: auto) chose on each host, from "
              "the speed-gate record: its draft length, and its speedup over plain decoding of the same build on "
              "the same host as the tune measured it (one stream), with its confidence interval's low and high "
              "ends. Shown whatever the speed gate's verdict, only while the record is ok; a draft length or a "
              "speedup the tune did not give is absent, never 0. Live traffic predicts: the tune's cost model on the "
              "live speculation counters (specops_tune_live_predicted_speedup, calibrated to read the measured figure "
              "on the tune's own requests), mean over the dashboard's range; absent while plain decoding is served "
              "or without traffic. The live check judges a window against its prediction band, not this interval "
              "(the panel below)."),
        Panel("The live check: live prediction and its band",
              [(f"specops_tune_live_predicted_speedup{{{SEL}}}", "{{instance}} live traffic predicts"),
               (f"specops_tune_live_band_low{{{SEL}}}", "{{instance}} band low"),
               (f"specops_tune_live_band_high{{{SEL}}}", "{{instance}} band high"),
               (f"specops_tune_live_predicted_speedup_upper{{{SEL}}}", "{{instance}} live upper end")],
              width=24, height=8,
              no_value="No live check: plain decoding served, no traffic in the exporter's window, or a record "
              "without the tune's model or band (re-tune to get one); TabbyAPI has none",
              description="The tune's cost model on the live speculation counters over the exporter's window "
              "(specops_tune_live_predicted_speedup) against its 95% prediction band for a window of n requests "
              "(specops_tune_live_band_low/high, n = specops_tune_live_window_requests: the window's tokens in the "
              "tune's requests): where windows of n new requests of the tune's kinds read, drawn at its shares "
              "(a window's own mix drawn too). Wide for a few requests, narrowing toward the tune's figure as the "
              "window fills, so a lasting move to one workload reads outside; not a confidence interval. "
              "Outside it for an hour: alert SpecopsTuneTrafficChanged. The upper end (the live figure over the "
              "lowest a window of n of the tune's requests reads against their whole figure) below 1 for 30 minutes: "
              "SpecopsTuneLivePredictsLoss; traffic that drafts nothing reads 1 and never fires it."),
        Panel("Build, models and speculation settings", [(f"llamacpp_server_info{{{SEL}}}", "")], "table",
              width=24, height=6, instant=True),
        Panel("Series this engine cannot give", [(f"llamacpp_exporter_unsupported_series{{{SEL}}}", "")], "table",
              width=24, height=8, instant=True, no_value="None: llama-server gives every series",
              description="From the exporter (--engine): series the server behind it cannot give, and why. They "
              "are absent for that instance (never 0), so the panels built on them stay empty there."),
    ]),
]


def _panel(p: Panel, pid: int, x: int, y: int) -> dict:
    targets = []
    for i, (expr, legend) in enumerate(p.targets):
        t = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
        if p.instant:
            t.update({"instant": True, "range": False, "format": "table"})
        targets.append(t)
    panel: dict = {
        "id": pid, "type": p.kind, "title": p.title, "datasource": DS, "targets": targets,
        "gridPos": {"x": x, "y": y, "w": p.width, "h": p.height},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": {},
    }
    if p.description:
        panel["description"] = p.description
    if p.no_value:
        panel["fieldConfig"]["defaults"]["noValue"] = p.no_value
    if p.kind == "stat":
        panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "value", "graphMode": "area"}
    if p.kind == "bargauge":  # one bar per host, its latest value
        panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True}
    if p.kind == "table":
        panel["transformations"] = [{"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True, "__name__": True}}}]
    panel.update(p.extra)
    return panel


def build() -> dict:
    panels: list[dict] = []
    pid, y = 1, 0
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        pid, y = pid + 1, y + 1
        x, row_h = 0, 0
        for p in row_panels:
            if x + p.width > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(_panel(p, pid, x, y))
            pid, x, row_h = pid + 1, x + p.width, max(row_h, p.height)
        y += row_h
    return {
        "uid": UID,
        "title": "specops: llama-server speculation",
        "description": "Is speculation paying for itself, did the server stay healthy? (specops-exporter)",
        "tags": ["specops", "llama.cpp"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-12h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            {"name": "instance", "label": "Exporter", "type": "query", "datasource": DS,
             "query": {"query": "label_values(llamacpp_up, instance)", "refId": "instance"},
             "definition": "label_values(llamacpp_up, instance)", "refresh": 2, "multi": True,
             "includeAll": True, "allValue": ".+", "current": {"text": "All", "value": "$__all"}, "hide": 0},
        ]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
