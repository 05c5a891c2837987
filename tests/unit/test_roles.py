"""Every role is documented and declares each setting once: a README, Galaxy metadata, and argument specs whose
entry points describe exactly the variables of defaults/main.yml (the first play validates inputs with them); the
top-level README's Layout names every role."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ALL = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ALL)
def test_role_has_readme_metadata_and_argument_specs_for_its_defaults(role: str) -> None:
    path = ROLES / role
    assert (path / "README.md").is_file(), f"roles/{role} has no README.md"
    meta = yaml.safe_load((path / "meta" / "main.yml").read_text())
    assert meta["galaxy_info"]["role_name"] == role
    specs = yaml.safe_load((path / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults_file = path / "defaults" / "main.yml"
    defaults = set(yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.is_file() else set()
    if not defaults:
        return
    # a role used only through tasks_from (roles/systemd_unit) describes its settings per entry point
    entry_points = [specs["main"]] if "main" in specs else list(specs.values())
    options = set().union(*(set(e.get("options") or {}) for e in entry_points))
    assert defaults == options, (
        f"roles/{role}: in defaults but not described: {sorted(defaults - options)}; "
        f"described but not in defaults: {sorted(options - defaults)}")


def test_every_role_is_found() -> None:
    assert {"llama_server", "llama_cpp", "models", "exporter", "monitoring", "loadbalancer",
            "specops_package"} <= set(ALL)


def test_the_top_level_readme_names_every_role_in_its_layout() -> None:
    """Issue 64 item 6: the Layout section named 7 of the 10 roles."""
    text = (ROLES.parent / "README.md").read_text()
    assert "\n## Layout\n" in text
    layout = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^- `roles/(\w+)`: \S", layout, re.M))
    dirs = {p.name for p in ROLES.iterdir() if p.is_dir()}
    assert sorted(dirs - named) == [], "roles/ directories the README's Layout section does not name (one line each)"
    assert sorted(named - dirs) == [], "the README's Layout section names roles that are gone"
