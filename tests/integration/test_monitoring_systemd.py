"""On the throwaway systemd host: deploy.yml with the exporter and Prometheus on (the Debian package comes with
the lab rootfs: the host has no mirror): the exporter unit beside the speculative service, Prometheus scraping
it, every dashboard panel with data (the speed gate's figures included), systemd restarts counted, a second
run that changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests import lab

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

REPO = Path(__file__).resolve().parents[2]
UNIT = "llama-server-speculative"
PROFILE = REPO / "tests" / "fixtures" / "deploy" / "smollm.yml"
DASHBOARD = REPO / "configs" / "grafana" / "dashboards" / "specops-llama-server.json"
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s", "$instance": ".+"}
# panels that cannot have data on this host, and why
NO_DATA_HERE = {"GPU memory (nvidia-smi)": "no GPU (the local Prometheus test covers it with a stub nvidia-smi)",
                "Series this engine cannot give": "llama-server gives every series: must stay empty (asserted)",
                "Tuned profile": "the suite's deploy profile sets llama_server_tune: off (test_tune_deploy tunes)",
                "The live check: live prediction and its band": "no tune here either (the local Prometheus test, "
                "test_monitoring_prometheus, serves a tune record with its band)"}
MONITORING = ["-e", "specops_exporter_enabled=true", "-e", "specops_monitoring_enabled=true",
              "-e", "monitoring_scrape_interval=2s", "-e", "monitoring_scrape_timeout=2s",
              "-e", "monitoring_evaluation_interval=2s"]


def deploy(labhost) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                                "-e", f"@{PROFILE}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                *MONITORING)


def get(labhost, url: str, timeout: float = 30) -> str:
    code = f"import urllib.request;print(urllib.request.urlopen({url!r},timeout={timeout}).read().decode())"
    return labhost.run(["python3", "-c", code], timeout=timeout + 30).stdout


def promql(labhost, expr: str) -> list[dict]:
    from urllib.parse import quote

    body = json.loads(get(labhost, f"http://127.0.0.1:9090/api/v1/query?query={quote(expr)}"))
    assert body["status"] == "success", body
    return body["data"]["result"]


def completion(labhost, prompt: str) -> None:
    code = ("import json,urllib.request;"
            f"b=json.dumps({{'prompt':{prompt!r},'n_predict':24,'temperature':0,'cache_prompt':False}}).encode();"
            "r=urllib.request.Request('http://127.0.0.1:8080/completion',data=b,"
            "headers={'Content-Type':'application/json'});urllib.request.urlopen(r,timeout=300).read()")
    labhost.run(["python3", "-c", code], timeout=330)


def wait(pred, timeout: float, what) -> None:  # type: ignore[no-untyped-def]
    """``what``: a text, or a callable giving it at the deadline (for state the wait itself updates)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (subprocess.SubprocessError, ValueError, KeyError, AssertionError) as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}: {last}")


@pytest.fixture(scope="module")
def monitored(labhost, llama_build):
    run = deploy(labhost)
    assert run.rc == 0, run.output[-6000:]
    return run


def test_exporter_unit_runs_hardened_beside_the_service(monitored, labhost):
    assert labhost.run(["systemctl", "is-active", "specops-exporter"]).stdout.strip() == "active"
    pid = int(labhost.show("specops-exporter", "MainPID"))
    uid = labhost.run(["stat", "-c", "%u", f"/proc/{pid}"]).stdout.strip()
    assert uid != "0"
    user = labhost.run(["stat", "-c", "%U", f"/proc/{pid}"]).stdout.strip()
    assert user == "specops-exporter"  # a static user: dbus-daemon drops DynamicUser clients (systemd#22737)
    journal = labhost.run(["journalctl", "-u", "specops-exporter", "--no-pager", "-n", "30"]).stdout

    def scraped() -> bool:  # a few passes, so a failing `systemctl show` would have been counted
        text = get(labhost, "http://127.0.0.1:9840/metrics")
        cycles = [float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith("specops_exporter_scrape_cycles_total ")]
        return bool(cycles) and cycles[0] >= 3

    wait(scraped, 60, "the exporter's first passes")
    text = get(labhost, "http://127.0.0.1:9840/metrics")
    assert "llamacpp_up 1.0" in text, text + journal
    # `systemctl show` over D-Bus works from the unit: systemd's restart count is known, and a healthy host
    # counts no process error at all (SpecopsExporterEndpointErrors stays silent)
    assert "llamacpp_systemd_restarts_total" in text, text + journal
    errors = [line for line in text.splitlines() if line.startswith("specops_exporter_scrape_errors_total{")
              and 'endpoint="process"' in line and not line.endswith(" 0.0")]
    assert not errors, errors
    assert "llamacpp_process_resident_memory_bytes" in text  # /proc of the server's DynamicUser is readable
    assert 'spec_type="draft-simple"' in text and 'backend="cpu"' in text


def test_prometheus_scrapes_it_and_every_panel_has_data(monitored, labhost):
    wait(lambda: any(r["value"][1] == "1" for r in promql(labhost, 'up{job="specops-exporter"}')), 120,
         "Prometheus to scrape the exporter")
    for prompt in ("Write the numbers from one to twenty:", "List the days of the week:", "Name the planets:"):
        completion(labhost, prompt)
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for p in dash["panels"] if p["type"] != "row" and p["title"] not in NO_DATA_HERE]
    empty: list[str] = []

    def all_panels() -> bool:
        empty.clear()
        for p in panels:
            exprs = [t["expr"] for t in p["targets"]]
            for var, value in GRAFANA_VARS.items():
                exprs = [e.replace(var, value) for e in exprs]
            if not any(promql(labhost, e) for e in exprs):
                empty.append(p["title"])
        if empty:
            completion(labhost, "Count backwards from ten:")
        return not empty

    wait(all_panels, 600, lambda: f"panels with data (still empty: {empty})")
    unsupported = next(p for p in dash["panels"] if p["title"] == "Series this engine cannot give")
    assert not promql(labhost, unsupported["targets"][0]["expr"].replace("$instance", ".+")), \
        "llama-server gives every series"
    rules = json.loads(get(labhost, "http://127.0.0.1:9090/api/v1/rules"))["data"]["groups"]
    assert all(r["health"] == "ok" for g in rules for r in g["rules"])


def test_systemd_restart_is_counted(monitored, labhost):
    before = int(labhost.show(UNIT, "NRestarts"))
    old_pid = int(labhost.show(UNIT, "MainPID"))
    labhost.run(["kill", "-9", str(old_pid)])
    wait(lambda: int(labhost.show(UNIT, "MainPID")) not in (0, old_pid), 120, "the service to come back")
    def counted() -> bool:
        text = get(labhost, "http://127.0.0.1:9840/metrics")
        return ("llamacpp_server_restarts_total 1.0" in text
                and f"llamacpp_systemd_restarts_total {float(before + 1)}" in text)

    wait(counted, 180, "the exporter to count the restart")


def test_second_run_changes_nothing(monitored, labhost):
    run = deploy(labhost)
    assert run.rc == 0, run.output[-4000:]
    assert run.recap(labhost.name).get("changed") == 0, run.output[-6000:]
    assert run.recap("localhost").get("changed") == 0, run.output[-6000:]
