"""A soak watched the production way: the real exporter scraping a real llama-server, a real Prometheus
(Debian package, the repository's rule files unchanged, 1 s intervals) scraping the exporter. The soak reads
the exporter (never llama-server's /metrics), then asks Prometheus whether the alert rules would have fired
over the run window. A SIGSTOP longer than the exporter's timeout makes llama-server look down."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from specops.exporter.process import PortPid
from specops.server import ServerProcess, free_port
from specops.soak import report
from specops.soak.alerts import evaluate, load_rules
from specops.soak.backoff import Backoff
from specops.soak.config import FaultPlan, FaultSpec, SoakConfig, Thresholds
from specops.soak.runner import SoakRunner

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "configs" / "prometheus"
ALERTS = PROM_DIR / "rules" / "specops-alerts.yml"


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_soak_reads_the_exporter_and_evaluates_the_alert_rules(
        start_server: Callable[..., ServerProcess], smollm: Path, tmp_path: Path, processes) -> None:  # type: ignore[no-untyped-def]
    assert shutil.which("prometheus"), "prometheus is installed by scripts/bootstrap"
    server = start_server(draft_model=str(smollm), threads=1)
    exporter_port, prom_port = free_port(), free_port()
    exporter = [sys.executable, "-m", "specops.exporter", "--server-url", server.base_url, "--listen-port",
                str(exporter_port), "--interval", "1", "--timeout", "1", "--pid", str(server.pid)]
    processes.start(exporter, tmp_path / "exporter.log")
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    cfg["rule_files"] = [str(PROM_DIR / f) for f in cfg["rule_files"]]
    cfg["scrape_configs"][0].update(scrape_interval="1s", scrape_timeout="1s",
                                    static_configs=[{"targets": [f"127.0.0.1:{exporter_port}"]}])
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    prom = f"http://127.0.0.1:{prom_port}"
    prometheus = ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                  f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                  "--log.level=warn"]
    processes.start(prometheus, tmp_path / "prometheus.log")
    wait_for(lambda: httpx.get(f"{prom}/api/v1/query", params={"query": "llamacpp_up"}).json()["data"]["result"]
             [0]["value"][1] == "1", 120, "Prometheus to see llamacpp_up 1 through the exporter")

    soak = SoakConfig(
        url=server.base_url, duration=30.0, concurrency=1, max_tokens=8, request_timeout=300.0,
        backoff=Backoff(initial=0.2, max_delay=2.0, give_up_after=600.0), references=1, reference_interval=5.0,
        sample_interval=1.0, bucket_seconds=10.0, exporter_url=f"http://127.0.0.1:{exporter_port}",
        prometheus_url=prom, alert_rules=str(ALERTS),
        faults=FaultPlan((FaultSpec("stop", 6.0),), first=2.0, interval=60.0, tail=0.0, limit=1),
        thresholds=Thresholds(min_tps_ratio=0.0, max_exporter_consecutive_failures=0), run_id="prom",
    )
    result = SoakRunner(soak, pid_source=PortPid(server.profile.port), expect_speculation=True).run()
    time.sleep(3)  # the last scrapes and rule evaluations of the window
    result.alerts = evaluate(prom, result.started_unix, time.time(), str(ALERTS), step=1.0)
    paths = report.write(result, tmp_path / "reports")

    checks = {c.name: c for c in result.checks}
    assert checks["exporter_up"].status == "pass", checks["exporter_up"].detail  # the exporter itself stayed up
    assert result.summary["lost"] == 0 and result.summary["failed"] == 0
    assert result.faults[0].recovered_at is not None
    samples = [s for s in (result.to_dict()["exporter"] or []) if s["up"]]
    assert samples and all("llamacpp_up" in s["values"] for s in samples)
    assert any(s["values"]["llamacpp_up"] == 0 for s in samples), "the stopped server never looked down"

    rules = {r["alert"]: r for r in result.alerts["rules"]}
    assert set(rules) >= {name for name, _expr, _for in load_rules(ALERTS)}
    assert all(r["error"] is None for r in rules.values()), [r for r in rules.values() if r["error"]]
    down = rules["LlamaServerDown"]
    assert down["condition_true_s"] > 0 and down["for_s"] == 120
    assert not down["would_fire"]  # a 6 s stop is far below its `for: 2m`
    md = paths["md"].read_text()
    assert "## Alert rules (Prometheus)" in md and "| LlamaServerDown | 120s |" in md
    assert json.loads(paths["json"].read_text())["alerts"]["rules"]
