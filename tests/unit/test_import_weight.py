"""What the deploy pays per task: Ansible forks a worker per task and host, and each worker loads the filter plugin
file anew; the deploy also runs `specops fit`, `check-pair` and `fetch-model` on every run. Both stay light: loading
the plugin, or starting one command, imports no HTTP client, GGUF reader or numpy unless that command needs them,
and no other command's module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("httpx", "gguf", "numpy", "specops.fetch", "specops.speedgate", "specops.soak", "specops.bench")


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_loading_the_filter_plugin_imports_nothing_heavy():
    loaded = modules_after(
        "import importlib.util as u\n"
        "s = u.spec_from_file_location('specops_filters', 'plugins/filter/specops.py')\n"
        "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
        "assert 'specops_argv' in m.FilterModule().filters()")
    assert heavy(loaded) == []


def test_a_lazy_filter_still_works_and_imports_on_use():
    loaded = modules_after(
        "import importlib.util as u\n"
        "s = u.spec_from_file_location('specops_filters', 'plugins/filter/specops.py')\n"
        "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
        "f = m.FilterModule().filters()\n"
        "assert f['specops_model_file']('smollm2-135m') == 'SmolLM2-135M-Instruct.Q4_1.gguf'\n"
        "assert f['specops_gate_mode'](None)")
    assert "specops.fetch" in loaded and "specops.speedgate" in loaded


@pytest.mark.parametrize("command, module", [("fit", "fit"), ("check-pair", "check_pair"),
                                             ("fetch-model", "fetch_model")])
def test_a_command_imports_its_own_module_only(command, module):
    loaded = modules_after(f"from specops.cli import build_parser\nbuild_parser({command!r})")
    commands = sorted(m for m in loaded if m.startswith("specops.commands."))
    assert commands == [f"specops.commands.{module}"]


def test_every_command_is_still_listed_without_one():
    loaded = modules_after("from specops.cli import build_parser\nbuild_parser()")
    listed = {m for m in loaded if m.startswith("specops.commands.")}
    on_disk = {f"specops.commands.{p.stem}" for p in (REPO / "src/specops/commands").glob("*.py")
               if p.stem != "__init__"}
    assert listed == on_disk
