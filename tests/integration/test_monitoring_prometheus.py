"""Every dashboard panel's PromQL returns data from a real Prometheus scraping the real exporter scraping a
real speculative llama-server under a short load.

Prometheus is the Debian package (2.42) on 127.0.0.1, 1 s scrape and rule intervals, a temporary TSDB; it
loads the repository's rule files unchanged. The only stand-in is ``nvidia-smi`` (there is no GPU here): a
two-line script printing nvidia-smi's CSV for the server's PID, so the GPU panel's path is exercised too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from specops.server import free_port
from specops.tune.band import SHARES, Band, Spread

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "configs" / "prometheus"
DASHBOARD = REPO / "configs" / "grafana" / "dashboards" / "specops-llama-server.json"
# Grafana's built-in variables, as Grafana would expand them for a 1h range
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s", "$instance": ".+"}
# empty for llama-server, which gives every series (test_monitoring_tabbyapi.py: not empty for TabbyAPI)
UNSUPPORTED_PANEL = "Series this engine cannot give [A]"
# the live check's prediction band for a window of n requests, as the tune keeps it beside its model: the panel
# "The live check" plots it against the live prediction
BAND = Band(Spread(SHARES, 24.0, 0.8, ((1.0, 0.5, 1.2), (1000.0, 0.75, 0.85)), level=0.95),
            Spread(SHARES, 24.0, 0.8, ((1.0, 0.6, 1.0), (1000.0, 0.78, 0.82)))).to_dict()
PROMPTS = ["Write the numbers from one to twenty:", "List the days of the week:",
           "The alphabet in capital letters is", "Count backwards from ten:", "Name the planets:"]


def panel_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            out.append((f"{panel['title']} [{target['refId']}]", expr))
    return out


def prometheus_config(tmp: Path, exporter_port: int) -> Path:
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    cfg["rule_files"] = [str(PROM_DIR / f) for f in cfg["rule_files"]]
    (job,) = cfg["scrape_configs"]
    job.update(scrape_interval="1s", scrape_timeout="1s",
               static_configs=[{"targets": [f"127.0.0.1:{exporter_port}"]}])
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def query(prom: str, expr: str) -> list[dict]:
    resp = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10)
    body = resp.json()
    assert body.get("status") == "success", f"{expr}: {body}"
    return body["data"]["result"]


def test_every_dashboard_panel_has_data(start_server, smollm, tmp_path, processes):
    assert shutil.which("prometheus"), "prometheus is installed by scripts/bootstrap"
    server = start_server(draft_model=str(smollm), draft_n_max=4)

    fake_smi = tmp_path / "bin" / "nvidia-smi"
    fake_smi.parent.mkdir()
    fake_smi.write_text(f"#!/bin/sh\necho '{server.pid}, GPU-00000000-0000-0000-0000-000000000000, 321'\n")
    fake_smi.chmod(0o755)

    # the record a deploy's speed gate leaves on a host (measured for real in test_deploy.py)
    # (for the unit it names: a unit file here stands in for /etc/systemd/system's)
    units = tmp_path / "units"
    units.mkdir()
    unit = units / "llama-server-speculative.service"
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    gate = tmp_path / "speed-gate.json"
    gate.write_text(json.dumps({"unit_file": str(unit),
                                "installed_unit_sha256": hashlib.sha256(unit.read_bytes()).hexdigest(),
                                "plain_tps": 40.0, "speculative_tps": 31.0, "ratio": 0.78, "min_ratio": 1.0,
                                "break_even_acceptance": 1.2, "verdict": "loses", "action": "warn",
                                "serving": "speculative", "spec_type": "draft-simple", "mode": "side by side",
                                "measured_at": "2026-11-23T00:00:00Z", "build_id": "test",
                                # the deploy's auto-tune (its summary in the record): the "Tuned profile" panel
                                "tune": {"chosen": "exact-n4", "spec_type": "draft-simple", "draft_n_max": 4,
                                         "predicted": 1.1, "reused": False, "when": "2026-11-23T00:00:00+0000",
                                         "speedup": {"estimate": 0.8, "low": 0.7, "high": 0.9, "n": 5},
                                         # the tune's cost model (specops.tune.live): the live prediction's panel
                                         "live_model": {"target_step_s": 0.02, "target_rel": {"1": 1.0, "5": 1.5},
                                                        "draft_step_s": 0.02, "draft_rel": {"1": 1.0, "5": 1.5},
                                                        "overheads": {"per_token_s": 0.001, "per_round_s": 0.0,
                                                                      "per_drafted_s": 0.0},
                                                        "measured": 0.8, "modelled": 0.9,
                                                        "round_correction_s": 0.002,
                                                        # the live check's prediction band (specops.tune.band)
                                                        "band": BAND}}}))
    exporter_port = free_port()
    processes.start([sys.executable, "-m", "specops.cli", "exporter", "--server-url", server.base_url,
                     "--listen-port", str(exporter_port), "--interval", "1", "--nvidia-smi", str(fake_smi),
                     "--gpu-interval", "1", "--speed-gate-file", str(gate), "--speed-gate-unit-dir", str(units)],
                    tmp_path / "exporter.log")
    prom_port = free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    processes.start(["prometheus", f"--config.file={prometheus_config(tmp_path, exporter_port)}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                     "--log.level=warn"], tmp_path / "prometheus.log")

    def wait(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if pred():
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in tmp_path.glob("*.log"))
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    wait(lambda: any(r["value"][1] == "1" for r in query(prom, 'up{job="specops-exporter"}')), 120,
         "Prometheus to scrape the exporter")
    wait(lambda: any(r["value"][1] == "1" for r in query(prom, "llamacpp_up")), 60, "llamacpp_up 1")

    stop = threading.Event()

    def load() -> None:  # a few speculative completions, varied prompts, no prompt cache
        i = 0
        while not stop.is_set():
            server.client.completion(PROMPTS[i % len(PROMPTS)], n_predict=24, cache_prompt=False)
            i += 1

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    queries = panel_queries()
    assert len(queries) >= 25
    empty: list[str] = []

    def all_have_data() -> bool:
        empty[:] = [name for name, expr in queries
                    if name != UNSUPPORTED_PANEL and not query(prom, expr)]
        return not empty

    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not all_have_data():
            time.sleep(1)
        assert not empty, f"panels without data: {empty}"
        assert not query(prom, dict(queries)[UNSUPPORTED_PANEL]), "llama-server gives every series"
    finally:
        stop.set()
        loader.join(timeout=300)

    # the rule files loaded unchanged and every rule evaluates without error
    groups = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) >= 15
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    # figures are sane: acceptance in (0, 1], acceptance length within 1..n_max+1
    (acc,) = query(prom, "instance:llamacpp_spec_acceptance_ratio:rate5m")
    assert 0 < float(acc["value"][1]) <= 1
    (mal,) = query(prom, "instance:llamacpp_spec_mean_acceptance_length:rate5m")
    assert 1 <= float(mal["value"][1]) <= 5
    (gpu,) = query(prom, "llamacpp_process_gpu_memory_bytes")
    assert float(gpu["value"][1]) == 321 * 1024 * 1024
    assert os.path.exists(tmp_path / "tsdb")
    # the tri-state and staleness panels: a speculative server is known to be meant to speculate, and the last
    # whole read of its /metrics is a few 1 s passes old, never in the future
    (known,) = query(prom, "llamacpp_speculation_state_known")
    (expected,) = query(prom, "llamacpp_speculation_expected")
    assert known["value"][1] == "1" and expected["value"][1] == "1"
    (stale,) = query(prom, "time() - llamacpp_exporter_last_success_timestamp_seconds")
    assert 0 <= float(stale["value"][1]) < 60, stale
