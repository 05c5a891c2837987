"""The specops package as roles/specops_package ships it to the hosts: what its wheel is built from, as one digest,
and what a host installs beside it (read from pyproject.toml, where pip reads it). Run from a checkout (or an
editable install of one): the checkout is this file's ``../../``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# what `pip wheel` reads from a checkout (pyproject.toml's package data included under src/)
_INPUTS = ("pyproject.toml", "README.md", "src")
_SKIP_DIRS = {"__pycache__", "build"}


def source_digest(source_dir: str) -> str:
    """sha256 over the relative names and bytes of every file the wheel is built from: the same digest means
    the same wheel (it is built with a fixed SOURCE_DATE_EPOCH), so the build can be skipped."""
    root = Path(source_dir).resolve()
    h = hashlib.sha256()
    for top in _INPUTS:
        base = root / top
        files = [base] if base.is_file() else sorted(
            p for p in base.rglob("*") if p.is_file() and not _SKIP_DIRS & set(p.relative_to(root).parts)
            and not any(part.endswith(".egg-info") for part in p.relative_to(root).parts))
        for p in files:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def host_requirements(extras: list[str] | None = None, pyproject: str | None = None) -> list[str]:
    """What a host installs beside specops (which it gets with --no-deps): pyproject.toml's dependencies and the
    optional groups ``extras`` (e.g. ``['soak']``), each requirement once - the one list, read from where pip
    reads it."""
    data = tomllib.loads(Path(pyproject or PYPROJECT).read_text())["project"]
    groups = data.get("optional-dependencies", {})
    unknown = [e for e in extras or [] if e not in groups]
    if unknown:
        raise ValueError(f"pyproject.toml has no optional dependency group {', '.join(unknown)}")
    out = list(data.get("dependencies", []))
    for extra in extras or []:
        out += [r for r in groups[extra] if r not in out]
    return out
