"""The TabbyAPI unit's quoting as a property (issue 28), as tests/unit/test_unit_quoting.py does for llama-server:
roles/tabbyapi's unit template, rendered with hostile values (spaces, %, $, quotes, backslashes, ;, non-ASCII) in
every place a value reaches a unit line — the models, install, config and API tokens paths, the model names in
the description, the environment — is accepted by `systemd-analyze verify` without a single complaint (the same
``complaints`` reader); values a unit cannot hold are refused in one line naming the variable. And the rendered
unit's `systemd-analyze security` exposure stays at or below 2.0.

The template is rendered by Jinja2 the way Ansible's template module does (trim_blocks) with the project's filter
plugin and Ansible's own core filters (basename, combine).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import FilterModule as AnsibleCoreFilters
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from tests.unit.test_unit_quoting import COMPONENT, EXE_COMPONENT, HOSTILE, _plugin_filters, complaints

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "tabbyapi"
MAX_EXPOSURE = 2.0

ENV = Environment(loader=FileSystemLoader(str(ROLE / "templates")), trim_blocks=True, undefined=StrictUndefined,
                  keep_trailing_newline=False)
ENV.filters.update(AnsibleCoreFilters().filters())
ENV.filters.update(_plugin_filters())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
PLAIN = st.text(alphabet=st.sampled_from(list("abcXYZ019_.-@")), min_size=1, max_size=8).filter(
    lambda s: s not in (".", ".."))
SIZES = st.sampled_from(["", "20G", "512M", "80%", "infinity", "1.5T"])


def variables(**overrides: object) -> dict:
    values = {**DEFAULTS, "ansible_managed": "test", "tabbyapi_models_dir": "/srv/specops/models",
              "tabbyapi_target_model": "/srv/specops/models/target", **overrides}
    return values


def render(root: Path, name: str = "tabbyapi.service", **overrides: object) -> Path:
    unit = root / name
    unit.write_text(ENV.get_template("tabbyapi.service.j2").render(**variables(**overrides)) + "\n", encoding="utf-8")
    return unit


def fake_python(root: Path, install_dir: Path) -> None:
    python = install_dir / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)          # verify checks ExecStart's binary: the quoted path must resolve to this file


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(models=st.lists(COMPONENT, min_size=1, max_size=3), target=COMPONENT, draft=st.one_of(st.just(""), COMPONENT),
       install=EXE_COMPONENT, config=COMPONENT, tokens=COMPONENT, state=PLAIN, memory=SIZES,
       env_value=st.text(alphabet=st.sampled_from(list("a %$\"'\\;=ö中")), max_size=8), name=HOSTILE)
def test_hostile_values_render_to_a_unit_systemd_accepts(tmp_path_factory, models, target, draft, install, config,
                                                         tokens, state, memory, env_value, name):
    root = tmp_path_factory.mktemp("unit")
    models_dir = root.joinpath(*models)
    install_dir = root / install / "tabbyapi"
    fake_python(root, install_dir)
    unit = render(root, tabbyapi_models_dir=str(models_dir), tabbyapi_target_model=str(models_dir / target),
                  tabbyapi_draft_model=str(models_dir / draft) if draft else "",
                  tabbyapi_install_dir=str(install_dir), tabbyapi_config_dir=str(root / config / "etc"),
                  tabbyapi_api_tokens_file=str(root / tokens / "api_tokens.yml"),
                  tabbyapi_state_dir=f"/var/lib/{state}", tabbyapi_memory_max=memory,
                  tabbyapi_environment={"SPECOPS_HOSTILE": env_value, "NAME": name})
    assert complaints(unit) == [], unit.read_text()


def test_a_hostile_path_is_written_escaped(tmp_path):
    """The escapes are systemd's (the values a property example would need to find again)."""
    fake_python(tmp_path, tmp_path / "opt")
    unit = render(tmp_path, tabbyapi_models_dir="/srv/tabby models %/",
                  tabbyapi_target_model="/srv/tabby models %/t 100%",
                  tabbyapi_install_dir=str(tmp_path / "opt"), tabbyapi_config_dir="/etc/tabby $x",
                  tabbyapi_environment={"A": 'x "%" $y'}).read_text()
    assert 'ReadOnlyPaths="/srv/tabby models %%/"' in unit
    assert "Description=TabbyAPI (exllamav2) t 100%%, port 5000" in unit
    assert '--config "/etc/tabby $$x/config.yml"' in unit
    assert 'Environment="A=x \\"%%\\" $y"' in unit
    assert "ExecStartPre=/bin/ln -sfn %d/api_tokens.yml /var/lib/tabbyapi/api_tokens.yml" in unit
    assert complaints(tmp_path / "tabbyapi.service") == [], unit


@pytest.mark.parametrize("overrides,fragment", [
    ({"tabbyapi_models_dir": "/srv/spec\nops"}, "tabbyapi_models_dir='/srv/spec\\nops': contains a newline"),
    ({"tabbyapi_models_dir": "srv/models"}, "tabbyapi_models_dir='srv/models': not an absolute path"),
    ({"tabbyapi_install_dir": "/opt/o'brien"}, "refuses an executable path"),
    ({"tabbyapi_state_dir": "/var/lib/tabby api"}, "tabbyapi_state_dir='tabby api': may hold only"),
    ({"tabbyapi_memory_max": "lots"}, "tabbyapi_memory_max='lots': not a size systemd reads"),
    ({"tabbyapi_environment": {"1BAD": "x"}}, "not an environment variable name"),
    ({"tabbyapi_api_tokens_file": "/etc/tabbyapi/t\\"}, "a trailing backslash continues the unit line"),
    ({"tabbyapi_api_tokens_file": "/etc/tabby\tapi.yml"}, "contains a tab"),
])
def test_what_a_unit_cannot_hold_is_refused_in_one_line(tmp_path, overrides, fragment):
    with pytest.raises(AnsibleFilterError) as err:
        render(tmp_path, **overrides)
    message = str(err.value)
    assert fragment in message and "\n" not in message.strip(), message


def exposure(unit: Path) -> float:
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                          text=True, check=False)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout + proc.stderr)
    assert match, proc.stdout[-2000:] + proc.stderr[-2000:]
    return float(match.group(1))


def test_security_exposure_is_at_most_2(tmp_path):
    fake_python(tmp_path, tmp_path / "opt")
    score = exposure(render(tmp_path, tabbyapi_install_dir=str(tmp_path / "opt")))
    print(f"\nsystemd-analyze security exposure of the TabbyAPI unit: {score}")
    assert score <= MAX_EXPOSURE, score
