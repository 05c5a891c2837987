"""No unit template directive takes an unescaped variable (issue 28): every ``{{ … }}`` on a directive line of every
``roles/*/templates/*.service.j2`` goes through one of specops.unitfile's filters (``specops_systemd_*``, optionally
joined after), or is a whole number (``| int``, or a variable the role's argument specs type ``int``/``bool``, which
the deploy's first play checks), or a loop variable over such, or a role constant (vars/main.yml).

"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(REPO.glob("roles/*/templates/*.service.j2"))
ESCAPED = re.compile(r"\|\s*specops_systemd_\w+\s*(\((?:[^()]|\([^()]*\))*\))?\s*"
                     r"(\|\s*join\(\s*'[^']*'\s*\)\s*)?$", re.S)
WHOLE = re.compile(r"^\(?\s*[A-Za-z_][\w.]*\s*\)?\s*\|\s*int\s*$")
LITERAL_CHOICE = re.compile(r"^'[^'{}%]*'\s+if\s+.+\s+else\s+'[^'{}%]*'$", re.S)
NAME = re.compile(r"^[A-Za-z_]\w*$")
FOR = re.compile(r"\{%-?\s*for\s+(\w+)\s+in\s+(.*?)\s*-?%\}", re.S)
EXPR = re.compile(r"\{\{(.*?)\}\}", re.S)
# facts a role derives from its own vars/main.yml only (role constants, not user input)
CONSTANT_FACTS = {"_llama_server_sandbox": "llama_server_backend_sandbox (roles/llama_server/vars/main.yml)"}


def _role_facts(template: Path) -> tuple[set[str], set[str]]:
    """(int/bool-typed options of the role's argument specs, names from its vars/main.yml)."""
    role = template.parents[1]
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    typed = {name for entry in specs.values() for name, spec in (entry.get("options") or {}).items()
             if spec.get("type") in ("int", "bool")}
    varfile = role / "vars" / "main.yml"
    constants = set((yaml.safe_load(varfile.read_text()) or {}) if varfile.exists() else {}) | set(CONSTANT_FACTS)
    return typed, constants


def raw_directives(text: str, typed: set[str], constants: set[str]) -> list[tuple[str, str, int]]:
    """(directive, expression, line) for every ``{{ … }}`` on a directive line that is not escaped."""
    safe_loops: set[str] = set()
    for var, iterable in FOR.findall(text):
        root = re.match(r"\(?\s*([A-Za-z_]\w*)", iterable)
        if "specops_systemd_" in iterable or (root and root.group(1) in constants and "|" not in iterable):
            safe_loops.add(var)
    found = []
    for match in EXPR.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        line = text[start:text.find("\n", match.start()) if "\n" in text[match.start():] else len(text)]
        directive = re.match(r"\s*([A-Za-z][A-Za-z0-9]*)=", line)
        if line.lstrip().startswith("#") or not directive:
            continue
        expr = match.group(1).strip()
        root = re.match(r"\(?\s*([A-Za-z_]\w*)", expr)
        ok = (bool(ESCAPED.search(expr)) or bool(WHOLE.match(expr)) or bool(LITERAL_CHOICE.match(expr))
              or (bool(NAME.match(expr)) and (expr in typed or expr in safe_loops))
              or (root is not None and root.group(1) in constants and "|" not in expr.replace("| join(' ')", "")))
        if not ok:
            found.append((directive.group(1), expr, text.count("\n", 0, match.start()) + 1))
    return found


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_every_directive_value_is_escaped(template):
    typed, constants = _role_facts(template)
    raw = raw_directives(template.read_text(), typed, constants)
    unknown = list(raw)
    assert unknown == [], "\n".join(f"{template.relative_to(REPO)}:{n}: {d}={{{{ {e} }}}} is not escaped: pass it "
                                    "through a specops_systemd_* filter (specops.filters.unitfile)"
                                    for d, e, n in unknown)


def test_every_template_is_covered():
    names = {p.name for p in TEMPLATES}
    assert {"llama-server.service.j2", "tabbyapi.service.j2", "specops-exporter.service.j2"} <= names


@pytest.mark.parametrize("line,flagged", [
    ("ReadOnlyPaths={{ tabbyapi_models_dir }}", True),
    ("WorkingDirectory={{ tabbyapi_state_dir }}", True),
    ("ExecStart={{ tabbyapi_install_dir }}/venv/bin/python", True),
    ("Description=TabbyAPI {{ tabbyapi_target_model | basename }}", True),
    ("Environment=\"{{ key }}={{ value }}\"", True),
    ("MemoryMax={{ tabbyapi_memory_max }}", True),
    ("ReadOnlyPaths={{ (tabbyapi_models_dir | specops_systemd_line('x')) ~ tabbyapi_state_dir }}", True),
    ("ReadOnlyPaths={{ tabbyapi_models_dir | specops_systemd_paths('tabbyapi_models_dir') }}", False),
    ("RestartSec={{ tabbyapi_restart_sec | int }}", False),
    ("RestartSec={{ tabbyapi_restart_sec }}", False),          # typed int in the specs below
    ("PrivateDevices={{ 'yes' if x else 'no' }}", False),
    ("# {{ anything }} in a comment", False),
])
def test_the_check_flags_raw_values(line, flagged):
    assert bool(raw_directives(line + "\n", {"tabbyapi_restart_sec"}, set())) is flagged
