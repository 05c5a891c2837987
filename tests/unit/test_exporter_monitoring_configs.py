"""Prometheus rules and the Grafana dashboard, checked offline (promtool, JSON structure)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROM = REPO / "configs" / "prometheus"
GRAFANA = REPO / "configs" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "specops-llama-server.json"
RULE_FILES = sorted((PROM / "rules").glob("*.yml"))
TEST_FILES = sorted((PROM / "tests").glob("*.yml"))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "promtool missing: scripts/bootstrap installs the prometheus package"
    return subprocess.run([exe, *args], capture_output=True, text=True, check=False, cwd=REPO)


def test_promtool_check_rules_and_config():
    out = promtool("check", "rules", *map(str, RULE_FILES))
    assert out.returncode == 0, out.stdout + out.stderr
    out = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass():
    out = promtool("test", "rules", *map(str, TEST_FILES))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_promtool_test():
    alerts = {r["alert"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]
              for r in g["rules"] if "alert" in r}
    fired: set[str] = set()
    for f in TEST_FILES:
        for t in yaml.safe_load(f.read_text())["tests"]:
            for case in t.get("alert_rule_test", []):
                if case.get("exp_alerts"):
                    fired.add(case["alertname"])
    assert alerts and alerts == fired, f"alerts without a firing test: {alerts - fired}"


def test_dashboard_json_is_generated_and_current():
    spec = importlib.util.spec_from_file_location("build_dashboard", GRAFANA / "build_dashboard.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["build_dashboard"] = mod  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules["build_dashboard"]
    assert DASHBOARD.read_text() == mod.render(), "run python3 configs/grafana/build_dashboard.py"


def test_dashboard_structure():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["schemaVersion"] >= 36
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance"} <= names
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (mine & cells), f"panel {p['title']} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["refId"] and t["expr"].strip()
            assert t["expr"].count("(") == t["expr"].count(")")
            # every selector of an exporter series is scoped to the instance variable
            for sel in re.findall(r"(?:llamacpp|specops_exporter)_[a-z_]+\{([^}]*)\}", t["expr"]):
                assert 'instance=~"$instance"' in sel, t["expr"]
    titles = " ".join(p["title"].lower() for p in panels)
    for needed in ("acceptance", "position", "tokens", "requests", "memory", "gpu", "restarts", "exporter"):
        assert needed in titles
    exprs = [t["expr"] for p in panels if p["type"] != "row" for t in p["targets"]]
    # issue 13: the tri-state speculation and the exporter's staleness have panels of their own
    assert 'llamacpp_speculation_state_known{instance=~"$instance"}' in exprs
    assert 'time() - llamacpp_exporter_last_success_timestamp_seconds{instance=~"$instance"}' in exprs


def test_grafana_provisioning_files():
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "specops.yml").read_text())
    assert prov["apiVersion"] == 1 and prov["providers"][0]["type"] == "file"
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "specops-prometheus.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=lambda p: p.name)
def test_rules_reference_only_exported_or_recorded_series(rule_file):
    recorded = {r["record"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]
                for r in g["rules"] if "record" in r}
    exported = set(re.findall(r'"((?:llamacpp|specops_exporter)_[a-z_]+)"',
                              "".join(p.read_text() for p in (REPO / "src/specops/exporter").glob("*.py"))))
    for g in yaml.safe_load(rule_file.read_text())["groups"]:
        for r in g["rules"]:
            for name in re.findall(r"\b((?:llamacpp|specops_exporter)_[a-z_]+)", r["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert base in exported or base.removesuffix("_total") in exported or name in recorded \
                    or base + "_total" in exported or base.removesuffix("_info") in exported, \
                    f"{r.get('alert') or r.get('record')}: {name}"  # an InfoMetricFamily "x" is exposed as x_info
