"""roles/tabbyapi rendered through Ansible: config.yml equals the Python renderer's and validates against the
schema derived from TabbyAPI's model; the unit passes systemd-analyze verify."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specops.tabbyapi.config import TabbyProfile, render_config
from tests import lab
from tests.unit.test_tabbyapi_config import DRAFT, TARGET, validate


def render(out: Path, *extra: str) -> lab.PlaybookRun:
    return lab.ansible_playbook("playbooks/render-tabbyapi.yml", "-e", f"tabbyapi_render_dir={out}",
                                "-e", f"tabbyapi_target_model={TARGET}", "-e", f"tabbyapi_models_dir={TARGET.parent}",
                                *extra)


def test_role_renders_the_same_config_as_the_cli_and_it_validates(tmp_path):
    run = render(tmp_path, "-e", f"tabbyapi_draft_model={DRAFT}", "-e", "tabbyapi_draft_n_max=4")
    assert run.rc == 0, run.output[-3000:]
    config = yaml.safe_load((tmp_path / "config.yml").read_text())
    validate(config)
    want = render_config(TabbyProfile.from_dict(
        {"model": str(TARGET), "draft_model": str(DRAFT), "ctx_size": 16384, "cache_mode": "Q4", "draft_n_max": 4,
         "autosplit_reserve": [96]}, check_dirs=False))
    assert config == want


def test_role_refuses_an_unknown_cache_mode_and_writes_nothing(tmp_path):
    run = render(tmp_path, "-e", "tabbyapi_cache_mode=Q5")
    assert run.rc != 0 and "TabbyAPI profile: cache_mode: unknown cache mode" in run.output and "Q5" in run.output
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_unit_verifies(tmp_path):
    install = tmp_path / "opt"
    python = install / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    run = render(out, "-e", f"tabbyapi_install_dir={install}", "-e", f"tabbyapi_draft_model={DRAFT}")
    assert run.rc == 0, run.output[-3000:]
    unit = out / "tabbyapi.service"
    text = unit.read_text()
    assert "LoadCredential=api_tokens.yml:/etc/tabbyapi/api_tokens.yml" in text
    assert "IPAddressDeny=any" in text and "DeviceAllow=/dev/nvidiactl rw" in text
    assert "--config /etc/tabbyapi/config.yml" in text
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr
