"""The dashboard works for TabbyAPI: every panel's PromQL evaluates without error against a real Prometheus (the
Debian package, the repository's rule files unchanged) scraping the real exporter (``--engine tabbyapi``); the
panels TabbyAPI can feed have data, exactly the ones built on series it cannot give are empty and say so.

The stand-in is TabbyAPI itself (it needs a CUDA GPU): tests/unit/fake_tabbyapi_server.py serves the /metrics
bodies TabbyAPI's own metrics code renders (tests/fixtures/exporter/tabbyapi-5b73894*.txt), and nvidia-smi, as in
test_monitoring_prometheus.py.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import httpx
import pytest

from specops.exporter.engine import TABBY_UNSUPPORTED
from specops.server import free_port
from tests.integration.test_monitoring_prometheus import DASHBOARD, panel_queries, prometheus_config, query

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "exporter"
FAKE = REPO / "tests" / "unit" / "fake_tabbyapi_server.py"
# panel [refId] queries that have no data for a TabbyAPI instance, all for series it cannot give
EMPTY_ON_TABBYAPI = {
    "Mean acceptance length (5m) [A]",
    "Mean acceptance length [A]",
    "Acceptance by draft position [A]",
    "Draft tokens, accepted tokens and verification steps /s [C]",
    "Speculation configured / active slots [A]",  # speculation expected: unknown on TabbyAPI, so absent
    "Speculation configured / active slots [B]",
    "Slots [A]",
    "Slots [B]",
    "Speculation state known [B]",
    # the deploy's speed gate (plain vs speculative on this host) is llama-server's; roles/tabbyapi has none
    "Draft acceptance vs this host's break-even [B]",
    "Decode speed vs plain decoding on this host [B]",
    "Speed-gate record [A]",   # no record, no series (no --speed-gate-file for TabbyAPI)
    # the deploy's auto-tune is llama-server's (its summary lives in the speed gate's record)
    "Tuned profile [A]",
    "Tuned profile [B]",
    "Tuned profile [C]",
    "Tuned profile [D]",
    "Tuned profile [E]",  # the live traffic's prediction needs the tune's record too
    "The live check: live prediction and its band [A]",  # and so do the live check's band and upper end
    "The live check: live prediction and its band [B]",
    "The live check: live prediction and its band [C]",
    "The live check: live prediction and its band [D]",
}


def test_dashboard_queries_evaluate_for_a_tabbyapi_exporter(tmp_path, processes):
    assert shutil.which("prometheus"), "prometheus is installed by scripts/bootstrap"
    server_port = free_port()
    server = processes.start([sys.executable, str(FAKE), "--port", str(server_port), "--switch-after", "0",
                              str(FIX / "tabbyapi-5b73894.txt"), str(FIX / "tabbyapi-5b73894-later.txt")],
                             tmp_path / "tabbyapi.log")
    fake_smi = tmp_path / "bin" / "nvidia-smi"
    fake_smi.parent.mkdir()
    fake_smi.write_text(f"#!/bin/sh\necho '{server.pid}, GPU-00000000-0000-0000-0000-000000000000, 321'\n")
    fake_smi.chmod(0o755)
    exporter_port = free_port()
    processes.start([sys.executable, "-m", "specops.cli", "exporter", "--engine", "tabbyapi",
                     "--server-url", f"http://127.0.0.1:{server_port}", "--listen-port", str(exporter_port),
                     "--interval", "1", "--pid", str(server.pid), "--nvidia-smi", str(fake_smi),
                     "--gpu-interval", "1"], tmp_path / "exporter.log")
    prom_port = free_port()
    prom = f"http://127.0.0.1:{prom_port}"
    processes.start(["prometheus", f"--config.file={prometheus_config(tmp_path, exporter_port)}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                     "--log.level=warn"], tmp_path / "prometheus.log")

    # the generation "ends" (second body) only once Prometheus holds a sample of the first, through the exporter:
    # otherwise, on a loaded machine, Prometheus may start after the switch and never see a counter move
    def first_body_scraped() -> bool:
        try:
            return bool(query(prom, "llamacpp_tokens_predicted_total"))
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    wait_deadline = time.monotonic() + 120
    while not first_body_scraped():
        assert time.monotonic() < wait_deadline, "Prometheus never scraped the exporter's first pass"
        time.sleep(1)
    httpx.get(f"http://127.0.0.1:{server_port}/advance", timeout=10).raise_for_status()

    queries = panel_queries()
    with_data: set[str] = set()

    def settled() -> bool:
        # every query evaluates (query() asserts status success); those TabbyAPI can feed get data
        for name, expr in queries:
            if query(prom, expr):
                with_data.add(name)
        return {n for n, _ in queries} - with_data <= EMPTY_ON_TABBYAPI

    deadline = time.monotonic() + 300
    ok = False
    while time.monotonic() < deadline:
        try:
            ok = settled()
        except (httpx.HTTPError, ValueError, KeyError):
            ok = False
        if ok:
            break
        time.sleep(1)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in tmp_path.glob("*.log"))
    missing = {n for n, _ in queries} - with_data - EMPTY_ON_TABBYAPI
    assert ok, f"panels without data: {sorted(missing)}\n{logs}"

    # the empty ones stay empty (absent, never 0), and every query still evaluates without error
    for name, expr in queries:
        result = query(prom, expr)
        assert (name in EMPTY_ON_TABBYAPI) == (not result), (name, result)
    # figures from TabbyAPI's counters: the acceptance ratio of the step between the two bodies
    (acc,) = query(prom, "instance:llamacpp_spec_acceptance_ratio:rate5m")
    assert 0.2394 < float(acc["value"][1]) < 0.2395, acc  # (2246 - 1362) / (10804 - 7112)
    (known,) = query(prom, "llamacpp_speculation_state_known")
    assert known["value"][1] == "0"
    said = {r["metric"]["series"] for r in query(prom, 'llamacpp_exporter_unsupported_series{engine="tabbyapi"}')}
    assert said == {s for s, _ in TABBY_UNSUPPORTED}

    # a panel left wholly empty on TabbyAPI says why instead of a bare "No data"
    dash = json.loads(DASHBOARD.read_text())
    for panel in dash["panels"]:
        refs = {f"{panel['title']} [{t['refId']}]" for t in panel.get("targets", [])}
        if refs and refs <= EMPTY_ON_TABBYAPI:
            assert "TabbyAPI" in panel["fieldConfig"]["defaults"].get("noValue", ""), panel["title"]

    groups = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
