"""The specops wheel (built by roles/specops_package and installed on every host) ships product code only (issue 14).

The fast checks take the file list from pyproject.toml's own package configuration, resolved with setuptools'
discovery the way a build resolves it, without building; the slow one builds the wheel as roles/exporter does
and reads the archive. Lab equipment (the throwaway systemd host, ``lab/specops_lab``) must not be in it, and
must still be importable where the tests and ``scripts/labhost`` look for it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages, find_packages

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
# Tools only a lab host needs; no module a host runs has any business naming them.
LAB_TOOLS = ("systemd-nspawn", "debootstrap")


def setuptools_config() -> dict:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["tool"]["setuptools"]


def shipped_packages() -> dict[str, Path]:
    """Package name → source directory, as ``[tool.setuptools]`` in pyproject.toml configures them."""
    config = setuptools_config()
    packages = config.get("packages", {"find": {}})
    if isinstance(packages, list):  # an explicit list, under package-dir's root
        root = REPO / config.get("package-dir", {}).get("", ".")
        return {name: root / name.replace(".", "/") for name in packages}
    find = packages.get("find", {})
    found: dict[str, Path] = {}
    for where in find.get("where", ["."]):
        discover = find_namespace_packages if find.get("namespaces", True) else find_packages
        for name in discover(where=str(REPO / where), include=find.get("include", ["*"]),
                             exclude=find.get("exclude", [])):  # fmt: skip
            found[name] = REPO / where / name.replace(".", "/")
    return found


def shipped_files() -> list[Path]:
    """The files the wheel holds: each package's modules plus its ``package-data`` (keyed by package, or ``*``)."""
    packages = shipped_packages()
    files = {p for pkg_dir in packages.values() for p in pkg_dir.glob("*.py")}
    for name, globs in setuptools_config().get("package-data", {}).items():
        for pkg_dir in packages.values() if name == "*" else [packages[name]] if name in packages else []:
            files |= {p for g in globs for p in pkg_dir.glob(g) if p.is_file()}
    return sorted(files)


def test_the_wheel_is_the_specops_package_and_nothing_else() -> None:
    packages = shipped_packages()
    assert "specops" in packages and "specops.exporter" in packages, sorted(packages)  # discovery did work
    strays = [name for name in packages if name != "specops" and not name.startswith("specops.")]
    assert not strays, f"the wheel would ship packages besides specops: {strays}"
    lab = REPO / "lab"
    assert not [d for d in packages.values() if d.resolve().is_relative_to(lab.resolve())], "lab/ is in the wheel"


def test_no_lab_module_is_shipped() -> None:
    files = {p.relative_to(REPO).as_posix(): p for p in shipped_files()}
    names = sorted(files)
    assert "src/specops/cli.py" in names and "src/specops/data/models.yml" in names, names[:20]
    assert not [n for n in names if "labhost" in n or "specops_lab" in n], names
    naming = {n: tool for n, p in files.items() if p.suffix == ".py"
              for tool in LAB_TOOLS if tool in p.read_text(errors="replace")}  # fmt: skip
    assert not naming, f"shipped modules name lab-only tools (move lab code to lab/specops_lab): {naming}"


def test_the_lab_lives_outside_the_wheel_and_is_importable() -> None:
    import specops_lab.labhost as labhost  # via pytest's `pythonpath` (pyproject), not PYTHONPATH=src

    assert Path(labhost.__file__).resolve() == (REPO / "lab" / "specops_lab" / "labhost.py").resolve()
    assert not (REPO / "src" / "specops" / "labhost.py").exists()
    script = (REPO / "scripts" / "labhost").read_text()
    assert '"$here/lab' in script and "-m specops_lab.labhost" in script
    assert "ruff check src lab " in (REPO / "scripts" / "test").read_text()


@pytest.mark.slow(reason="builds the wheel with pip in build isolation: a few seconds")
def test_the_built_wheel_holds_no_lab_module(tmp_path: Path) -> None:
    # A copy of what the build reads, so the build's own build/ and egg-info stay out of the checkout.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # what roles/specops_package runs on the controller ("Build the specops wheel"), for the exporter and soak
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "out"),
            str(source)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "out").glob("specops-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "specops/cli.py" in names and "specops/data/models.yml" in names, names
    assert {n.split("/")[0] for n in names} == {"specops", wheel.name.split("-py3")[0] + ".dist-info"}, names
    assert not [n for n in names if "labhost" in n or "specops_lab" in n], names
