"""The code the deploy runs on its hosts is the package's specops.host (issue 64 item 5): standard library only (it
runs before the specops wheel is on a host, and where it never is), shipped as one zip that specops.hostzip builds
the way roles/specops_package/tasks/host_scripts.yml runs it, and every host script a role runs comes from that zip."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from specops import hostzip
from specops.host.__main__ import SCRIPTS
from tests.unit.hostcode import BARE

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
SPECOPS = REPO / "src" / "specops"
HOST = SPECOPS / "host"
BUILDER = REPO / "roles" / "specops_package" / "tasks" / "host_scripts.yml"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, in functions too; ``from specops import keyfile`` is
    ``specops.keyfile``; a relative import is ``.`` and its module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, "." * node.level + (node.module or "")))
            elif node.module == "specops":
                found += [(node.lineno, f"specops.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, str(node.module)))
    return found


def allowed(module: str) -> bool:
    """The standard library, specops.host and specops.keyfile (SHARED); nothing of specops else, nothing else."""
    top = module.split(".")[0]
    if top == "specops":
        return module == "specops.keyfile" or module == "specops.host" or module.startswith("specops.host.")
    return top in sys.stdlib_module_names or top == "__future__"


def host_modules() -> list[Path]:
    """specops.host's modules, its packages' too (specops/host/drain/)."""
    return sorted(HOST.rglob("*.py"))


def test_the_host_code_imports_the_standard_library_and_itself_only():
    assert len(host_modules()) >= 12, host_modules()
    bad = [f"{p.relative_to(REPO)}:{line}: {module}" for p in host_modules() for line, module in imports(p)
           if not allowed(module)]
    assert not bad, "specops.host runs with the host's python3 and the standard library only:\n" + "\n".join(bad)


def test_the_package_modules_the_zip_carries_import_nothing_but_the_standard_library():
    """specops/__init__.py and specops/keyfile.py go into the zip with specops.host (hostzip.SHARED): they must
    import without the wheel's dependencies too; and they are all that specops.host imports of specops."""
    assert set(hostzip.SHARED) == {"__init__.py", "keyfile.py"}
    for name in hostzip.SHARED:
        found = [m for _, m in imports(SPECOPS / name)]
        assert all(m.split(".")[0] in sys.stdlib_module_names or m == "__future__" for m in found), (name, found)
    used = {m for p in host_modules() for _, m in imports(p) if m.startswith("specops.")
            and not m.startswith("specops.host")}
    assert used == {"specops.keyfile"}, used


def test_the_check_catches_what_it_must():
    assert allowed("os") and allowed("urllib.request") and allowed("specops.keyfile")
    assert allowed("specops.host.hostlib") and allowed("__future__")
    assert not allowed("httpx") and not allowed("yaml") and not allowed("specops.client")
    assert not allowed("specops.paths") and not allowed(".hostlib") and not allowed("psutil")


def test_the_dispatch_knows_every_script():
    """SCRIPTS (specops/host/__main__.py) is every module of specops.host with a ``main`` and every package of it
    with a ``__main__`` (the drain): hostlib is none."""
    scripts = {p.parent.name for p in HOST.glob("*/__main__.py")}
    for p in sorted(HOST.glob("*.py")):
        tree = ast.parse(p.read_text())
        if p.stem != "__main__" and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            scripts.add(p.stem)
    assert set(SCRIPTS) == scripts and "hostlib" not in scripts and "drain" in scripts, scripts


# ---- the zip, built as the role builds it, run by a python3 with the standard library only ------------------------
def test_the_role_builds_the_zip_with_specops_hostzip_from_the_checkout():
    tasks = yaml.safe_load(BUILDER.read_text())
    build = tasks[0]
    argv = build["ansible.builtin.command"]["argv"]
    assert argv[1:] == ["-m", "specops.hostzip", "{{ _dir }}"], argv
    assert build["environment"]["PYTHONPATH"] == "{{ role_path }}/../../src"
    assert build["run_once"] is True and build["check_mode"] is False and build["delegate_to"] == "localhost"
    assert (REPO / "roles" / "llama_server" / "../../src/specops/hostzip.py").resolve() == SPECOPS / "hostzip.py"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zip made by the role's command line (python -m specops.hostzip DIR, this checkout's src/ on PYTHONPATH)."""
    where = tmp_path_factory.mktemp("host-scripts")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-m", "specops.hostzip", str(where)], capture_output=True, text=True,
                         env=env, check=True, timeout=60).stdout.strip()
    assert re.fullmatch(re.escape(str(where)) + r"/host-scripts-[0-9a-f]{12}\.pyz", out), out
    again = subprocess.run([sys.executable, "-m", "specops.hostzip", str(where)], capture_output=True, text=True,
                           env=env, check=True, timeout=60).stdout.strip()
    assert again == out and [p.name for p in where.iterdir()] == [Path(out).name]   # the same content, one file
    return Path(out)


def test_the_zip_holds_the_host_code_and_the_modules_it_shares(built: Path):
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
        inside = {f"specops/host/{p.relative_to(HOST).as_posix()}": p for p in host_modules()}
        assert "specops/host/drain/__main__.py" in inside   # a package's modules too
        assert names == {"__main__.py", "specops/__init__.py", "specops/keyfile.py", *inside}, names
        for name, p in inside.items():
            assert zf.read(name) == p.read_bytes(), name
    assert built.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert hostzip.build(built.parent) == built   # the role's and the callback's builds name the same zip


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_runs_from_the_zip_without_the_venv(built: Path, script: str, tmp_path: Path):
    """``python3 -I -S ZIP SCRIPT --help``: no PYTHONPATH, no site-packages (no venv, no installed specops)."""
    proc = subprocess.run([*BARE, str(built), script, "--help"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script}.py"), proc.stdout


def test_the_zip_refuses_an_unknown_script_in_one_line(built: Path, tmp_path: Path):
    proc = subprocess.run([*BARE, str(built), "hostlib"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("hostlib: no such host script\nusage: ")


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no system python3")
def test_the_systems_python3_runs_it_too(built: Path, tmp_path: Path):
    proc = subprocess.run(["/usr/bin/python3", "-I", str(built), "unit_state", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: unit_state.py"), proc.stderr


# ---- every host script a role runs comes from the zip --------------------------------------------------------------
def role_tasks() -> list[tuple[str, dict]]:
    """(task file, task) of every task in the roles' task files, those in blocks, rescues and always included."""
    found: list[tuple[str, dict]] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, path)
        elif isinstance(node, dict):
            found.append((path, node))
            for key in ("block", "rescue", "always"):
                walk(node.get(key), path)

    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        walk(yaml.safe_load(path.read_text()), path.relative_to(REPO).as_posix())
    return found


def script_tasks() -> list[tuple[str, str]]:
    """(task file, cmd) of every ansible.builtin.script task in the roles."""
    return [(path, str(t["ansible.builtin.script"].get("cmd", ""))) for path, t in role_tasks()
            if isinstance(t.get("ansible.builtin.script"), dict)]


def test_every_script_task_runs_a_host_script_from_the_zip():
    tasks = script_tasks()
    assert len(tasks) >= 15, tasks
    zipped = re.compile(r"^\{\{ specops_package_host_scripts \| quote \}\} (\w+) ")
    alone = [(path, cmd[:60]) for path, cmd in tasks if not zipped.match(cmd)]
    assert not alone, f"run these from the zip ({{{{ specops_package_host_scripts | quote }}}} SCRIPT ...): {alone}"
    ran = {m.group(1) for _, cmd in tasks if (m := zipped.match(cmd))}
    assert ran <= set(SCRIPTS), ran - set(SCRIPTS)
    assert ran == set(SCRIPTS), f"no role runs {set(SCRIPTS) - ran}"
    assert not list((REPO / "roles").glob("*/files/*.py")), "host code belongs in src/specops/host"


def test_each_role_that_runs_a_host_script_builds_the_zip_first():
    """A role's script tasks read specops_package_host_scripts: the role includes host_scripts.yml itself, or runs
    only where llama_server's inputs.yml made it (loadbalancer's drain/ready: called from llama_server's pool)."""
    users = {path.split("/")[1] for path, _ in script_tasks()}
    builders = {p.parts[-3] for p in (REPO / "roles").glob("*/tasks/*.yml")
                if re.search(r"include_tasks: .*host_scripts\.yml|file: .*host_scripts\.yml", p.read_text())}
    assert users == {"deploy_lock", "llama_cpp", "llama_server", "llama_server_speed_gate", "loadbalancer", "models",
                     "systemd_unit", "tabbyapi"}, users
    assert builders == users, users - builders


def host_scripts_includes() -> list[tuple[str, object]]:
    """(file, the include's ``when``) for every task of the roles that includes host_scripts.yml."""
    def target(task: dict) -> str:
        inc = task.get("ansible.builtin.include_tasks")
        return inc.get("file", "") if isinstance(inc, dict) else str(inc or "")

    return [(path, t.get("when")) for path, t in role_tasks() if target(t).endswith("host_scripts.yml")]


def test_a_host_that_has_the_zip_skips_every_further_include_of_it_as_one_task():
    """host_scripts.yml is included by every role that runs a host script, several times a deploy: each include is
    guarded by ``specops_package_host_scripts is not defined``, so a host that has the zip's path from an earlier
    include of the run skips the include (one task) instead of running its three (two of them skipped)."""
    includes = host_scripts_includes()
    assert len(includes) >= 8, includes
    guard = "specops_package_host_scripts is not defined"
    unguarded = [path for path, when in includes
                 if guard not in (when if isinstance(when, str) else " and ".join(map(str, when or [])))]
    assert not unguarded, f"guard these includes of host_scripts.yml with `{guard}`: {unguarded}"
