"""One list of host dependencies (issue 41 item 2): pyproject.toml's, read by the exporter role and the soak play
through the specops_host_requirements filter; no controller-side package (ansible-core, gguf) on a host."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
import yaml

from tests.unit.by_path import plugin_filters

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]


def _package_filters():
    return plugin_filters("package")


def test_the_host_list_is_pyprojects():
    f = _package_filters()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f.specops_host_requirements([]) == project["dependencies"]
    soak = f.specops_host_requirements(["soak"])
    assert soak[: len(project["dependencies"])] == project["dependencies"]
    assert set(soak) == set(project["dependencies"]) | set(project["optional-dependencies"]["soak"])
    for host in (f.specops_host_requirements([]), soak):
        names = {r.split(">")[0].split("<")[0].split("=")[0].lower() for r in host}
        assert not names & {"ansible-core", "ansible", "gguf", "jinja2"}, host
    with pytest.raises(ValueError, match="no optional dependency group nope"):
        f.specops_host_requirements(["nope"])


def test_the_roles_read_the_filter_not_a_copy():
    exporter = yaml.safe_load((REPO / "roles/exporter/defaults/main.yml").read_text())
    assert exporter["exporter_requirements"] == "{{ [] | specops_host_requirements }}"
    play = yaml.safe_load((REPO / "playbooks/soak.yml").read_text())[0]
    assert play["vars"]["soak_requirements"] == "{{ ['soak'] | specops_host_requirements }}"
    # no requirement specifier is written anywhere else in the roles or playbooks
    for path in [*REPO.glob("roles/*/defaults/main.yml"), *REPO.glob("playbooks/*.yml")]:
        text = path.read_text()
        assert "httpx>=" not in text and "prometheus-client>=" not in text, path


def test_the_wheel_requires_nothing_of_the_controller_unless_asked():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(r.startswith("ansible") for r in project["dependencies"])
    assert any(r.startswith("ansible-core") for r in project["optional-dependencies"]["controller"])
    assert "controller" in (REPO / "scripts/bootstrap").read_text()
