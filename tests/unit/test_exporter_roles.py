"""The exporter and monitoring roles: argument specs, and their templates rendered by real Ansible and checked
by the real tools (promtool, systemd-analyze). The systemd host test deploys them for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


@pytest.mark.parametrize("role", ["exporter", "monitoring"])
def test_argument_specs_cover_the_defaults(role):
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), set(defaults) ^ set(options)
    assert (ROLES / role / "README.md").is_file()


def render(tmp_path: Path, extra_vars: dict) -> Path:
    """Render both roles' templates with their defaults (plus extra_vars) through ansible-playbook."""
    out = tmp_path / "out"
    out.mkdir()
    tasks = []
    for role, template, dest in [
        ("exporter", "specops-exporter.service.j2", "specops-exporter.service"),
        ("monitoring", "prometheus.yml.j2", "prometheus.yml"),
        ("monitoring", "specops-thresholds.yml.j2", "rules/specops-thresholds.yml"),
        ("monitoring", "grafana-dashboards.yml.j2", "grafana-dashboards.yml"),
        ("monitoring", "grafana-datasource.yml.j2", "grafana-datasource.yml"),
    ]:
        tasks.append({"name": f"render {template}", "ansible.builtin.template": {
            "src": str(ROLES / role / "templates" / template), "dest": str(out / dest)},
            "vars": {"role_path": str(ROLES / role), "_gpu": False}})
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars_files": [str(ROLES / "exporter/defaults/main.yml"), str(ROLES / "exporter/vars/main.yml"),
                            str(ROLES / "monitoring/defaults/main.yml")],
             "vars": extra_vars,
             "tasks": [{"ansible.builtin.file": {"path": str(out / "rules"), "state": "directory"}}, *tasks]}]
    book = tmp_path / "render.yml"
    book.write_text(yaml.safe_dump(play))
    exe = Path(sys.executable).with_name("ansible-playbook")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": None}, "children": {"llama_servers": {
        "hosts": {"gpu1": None, "gpu2": {"ansible_host": "10.0.0.2", "exporter_listen_port": 9999},
                  "gpu3": {"exporter_scrape_address": "gpu3.example:9840"}, "localhost": None}}}}}))
    proc = subprocess.run([str(exe), "-i", str(inventory), "-e", f"ansible_python_interpreter={sys.executable}",
                           str(book)], capture_output=True, text=True, cwd=tmp_path, check=False,
                          env={**os.environ, "ANSIBLE_FILTER_PLUGINS": str(ROLES.parent / "plugins" / "filter")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("roles"), {"ansible_managed": "test"})


def test_thresholds_template_matches_the_tested_rule_file(rendered):
    static = (REPO / "configs/prometheus/rules/specops-thresholds.yml").read_text()
    ours = (rendered / "rules/specops-thresholds.yml").read_text()
    assert ours.split("\n", 1)[1] == static  # identical but for the managed-by header


def test_rendered_prometheus_config_is_valid(rendered):
    cfg = yaml.safe_load((rendered / "prometheus.yml").read_text())
    assert cfg["scrape_configs"][0]["static_configs"][0]["targets"] == [
        "gpu1:9840", "10.0.0.2:9999", "gpu3.example:9840",
        "127.0.0.1:9840"]  # Prometheus's own host: its exporter listens on loopback (the default)
    for name in ("specops-recording.yml", "specops-alerts.yml"):
        shutil.copy(REPO / "configs/prometheus/rules" / name, rendered / "rules" / name)
    proc = subprocess.run(["promtool", "check", "config", str(rendered / "prometheus.yml")], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendered_exporter_unit_is_hardened_and_verifies(rendered):
    unit = (rendered / "specops-exporter.service").read_text()
    for line in ("User=specops-exporter", "Group=specops-exporter", "ProtectSystem=strict", "ProtectHome=yes",
                 "NoNewPrivileges=yes",
                 "CapabilityBoundingSet=", "PrivateDevices=yes", "IPAddressDeny=any", "MemoryDenyWriteExecute=yes",
                 "--unit llama-server-speculative.service", "--listen-address 127.0.0.1", "--interval 5",
                 "-m specops.exporter"):
        assert line in unit, line
    assert "ProtectProc=invisible" not in unit  # would hide llama-server's /proc entries
    # dbus-daemon drops DynamicUser clients (systemd/systemd#22737): `systemctl show` (PID, NRestarts) would fail
    assert "DynamicUser=" not in unit
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    proc = subprocess.run(["systemd-analyze", "verify", str(rendered / "specops-exporter.service")],
                          capture_output=True, text=True, check=False)
    problems = [line for line in proc.stderr.splitlines()
                if "specops-exporter.service" in line and "llama-server-speculative.service" not in line]
    assert not problems, proc.stderr


def test_grafana_provisioning_points_at_the_dashboard_dir(rendered):
    prov = yaml.safe_load((rendered / "grafana-dashboards.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/specops"
    ds = yaml.safe_load((rendered / "grafana-datasource.yml").read_text())
    assert ds["datasources"][0]["url"] == "http://127.0.0.1:9090"
    json.loads((REPO / "configs/grafana/dashboards/specops-llama-server.json").read_text())
