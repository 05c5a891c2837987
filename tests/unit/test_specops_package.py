"""roles/specops_package is the one way specops reaches hosts (issue 14): the exporter role and the soak playbook
use it, nothing else builds or ships a wheel, and its build is skipped only when the source did not change."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.unit.by_path import plugin_filters

ROOT = Path(__file__).resolve().parents[2]
source_digest = plugin_filters("package").specops_source_digest


def _checkout(tmp_path: Path) -> Path:
    src = tmp_path / "co"
    (src / "src" / "specops").mkdir(parents=True)
    (src / "pyproject.toml").write_text("[project]\nname = 'specops'\n")
    (src / "README.md").write_text("readme\n")
    (src / "src" / "specops" / "__init__.py").write_text("x = 1\n")
    return src


def test_the_source_digest_follows_what_the_wheel_is_built_from(tmp_path: Path) -> None:
    co = _checkout(tmp_path)
    first = source_digest(str(co))
    assert source_digest(str(co)) == first  # stable
    # build leftovers are not source
    (co / "src" / "specops" / "__pycache__").mkdir()
    (co / "src" / "specops" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    (co / "src" / "specops.egg-info").mkdir()
    (co / "src" / "specops.egg-info" / "PKG-INFO").write_text("x")
    (co / "build" / "lib").mkdir(parents=True)
    (co / "tests").mkdir()
    (co / "tests" / "t.py").write_text("t")
    assert source_digest(str(co)) == first
    # a changed module, a new data file, a renamed file or a changed pyproject.toml each change it
    (co / "src" / "specops" / "__init__.py").write_text("x = 2\n")
    second = source_digest(str(co))
    assert second != first
    (co / "src" / "specops" / "data.yml").write_text("a: 1\n")
    third = source_digest(str(co))
    assert third not in (first, second)
    shutil.move(co / "src" / "specops" / "data.yml", co / "src" / "specops" / "data2.yml")
    assert source_digest(str(co)) not in (first, second, third)
    (co / "pyproject.toml").write_text("[project]\nname = 'specops'\nversion = '2'\n")
    assert source_digest(str(co)) not in (first, second, third)


def _yaml_files() -> list[Path]:
    return sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml"), ROOT / "deploy.yml"])


def test_only_the_package_role_builds_or_installs_specops_wheels() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in _yaml_files()
                 if ("pip wheel" in p.read_text() or "'wheel', '--no-deps'" in p.read_text()
                     or ", wheel, --no-deps" in p.read_text())
                 and p.parent.parent.name != "specops_package"]
    assert not offenders, f"these build a wheel themselves instead of using roles/specops_package: {offenders}"


def _includes_package_role(path: Path) -> bool:
    def walk(node: object) -> bool:
        if isinstance(node, dict):
            inc = node.get("ansible.builtin.include_role") or node.get("ansible.builtin.import_role")
            if isinstance(inc, dict) and inc.get("name") == "specops_package":
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False
    return walk(yaml.safe_load(path.read_text()))


def test_the_exporter_and_the_soak_ship_specops_through_the_package_role() -> None:
    assert _includes_package_role(ROOT / "roles" / "exporter" / "tasks" / "install.yml")
    assert _includes_package_role(ROOT / "playbooks" / "soak.yml")
