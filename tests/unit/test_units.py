"""The systemd units as rendered by roles/llama_server, for every backend, checked by systemd itself."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specops.capabilities import parse_help
from tests import lab

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server-0c1e57098"
CONFIGS = lab.REPO / "configs"

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


@pytest.fixture(scope="module")
def caps_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("caps") / "capabilities.json"
    path.write_text(parse_help((FIX / "llama-server_help.txt").read_text()).to_json())
    return path


def render(caps_file: Path, out: Path, *extra: str) -> None:
    run = lab.ansible_playbook("playbooks/render-configs.yml", "-e", f"capabilities_file={caps_file}",
                               "-e", f"llama_server_render_dir={out}", *extra)
    assert run.rc == 0, run.output[-3000:]


def exposure(unit: Path) -> float:
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                         text=True, cwd=unit.parent, check=False).stdout
    match = re.search(r"Overall exposure level for \S+: ([\d.]+)", out)
    assert match, out[-500:]
    return float(match.group(1))


def test_committed_units_match_the_template(caps_file, tmp_path):
    render(caps_file, tmp_path)
    for name in ("llama-server-speculative.service", "llama-server-baseline.service"):
        assert (tmp_path / name).read_text() == (CONFIGS / name).read_text(), (
            f"configs/{name} is stale: run `ansible-playbook playbooks/render-configs.yml "
            "-e capabilities_file=...` and commit the result")


def test_speculative_unit_is_complete(caps_file, tmp_path):
    render(caps_file, tmp_path)
    text = (tmp_path / "llama-server-speculative.service").read_text()
    assert "--spec-draft-model" in text and "--spec-type draft-simple" in text
    assert "--metrics" in text and "--host 127.0.0.1" in text and "--port 8080" in text
    assert "--draft-max" not in text
    base = (tmp_path / "llama-server-baseline.service").read_text()
    assert "--spec-type none" in base and "--spec-draft-model" not in base and "--port 8081" in base


@pytest.mark.parametrize("backend,devices,groups,limit", [
    ("cpu", [], None, 1.2),
    ("cuda", ["/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "char-nvidia-frontend rw"], "video", 1.6),
    ("vulkan", ["char-drm rw"], "render video", 1.6),
    ("hip", ["/dev/kfd rw", "char-drm rw"], "render video", 1.6),
])
def test_backend_units_are_hardened(caps_file, tmp_path, backend, devices, groups, limit):
    fake_root = tmp_path / "opt"
    binary = fake_root / "current" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    render(caps_file, tmp_path, "-e", f"llama_server_backend={backend}", "-e", f"llama_server_install_root={fake_root}")
    unit = tmp_path / "llama-server-speculative.service"
    text = unit.read_text()
    assert set(devices) <= set(re.findall(r"^DeviceAllow=(.*)$", text, re.M))
    if backend == "cpu":
        assert "DeviceAllow" not in text and "PrivateDevices=yes" in text and "MemoryDenyWriteExecute=yes" in text
    assert (f"SupplementaryGroups={groups}" in text) if groups else ("SupplementaryGroups" not in text)
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr
    assert exposure(unit) <= limit


def test_removed_flag_fails_rendering(caps_file, tmp_path):
    run = lab.ansible_playbook("playbooks/render-configs.yml", "-e", f"capabilities_file={caps_file}",
                               "-e", f"llama_server_render_dir={tmp_path}",
                               "-e", '{"llama_server_extra_args": ["--draft-max", "8"]}')
    assert run.rc != 0 and "--draft-max has been removed" in run.text
    assert not list(tmp_path.glob("*.service"))


def test_a_privileged_port_gets_the_one_capability(caps_file, tmp_path):
    """llama_server_bind_privileged_port: the unit keeps CAP_NET_BIND_SERVICE (bounding and ambient) and drops
    PrivateUsers= (a capability in the service's own user namespace does not bind the host's port 80); the rest
    of the hardening stays. Without it preflight refuses a port below 1024."""
    binary = tmp_path / "opt" / "current" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    render(caps_file, tmp_path, "-e", "llama_server_port=80", "-e", "llama_server_bind_privileged_port=true",
           "-e", f"llama_server_install_root={tmp_path / 'opt'}")
    unit = tmp_path / "llama-server-speculative.service"
    text = unit.read_text()
    assert "\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\n" in text
    assert "\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n" in text
    assert "\nCapabilityBoundingSet=\n" not in text and "PrivateUsers" not in text
    assert "SystemCallFilter=@system-service" in text and "NoNewPrivileges=yes" in text and "--port 80" in text
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False,
                            cwd=tmp_path)
    assert not [line for line in verify.stderr.splitlines() if unit.name in line], verify.stderr
    default = tmp_path / "default"
    default.mkdir()
    render(caps_file, default)
    plain = (default / "llama-server-speculative.service").read_text()
    assert "\nCapabilityBoundingSet=\n" in plain and "\nAmbientCapabilities=\n" in plain and "PrivateUsers=yes" in plain


def test_a_privileged_port_without_the_capability_is_refused(caps_file, tmp_path):
    run = lab.ansible_playbook("playbooks/render-configs.yml", "-e", f"capabilities_file={caps_file}",
                               "-e", f"llama_server_render_dir={tmp_path}", "-e", "llama_server_port=80")
    assert run.rc != 0 and "llama_server_bind_privileged_port: true" in run.text, run.output[-2000:]
    assert not list(tmp_path.glob("*.service"))
