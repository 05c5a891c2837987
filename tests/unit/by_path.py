"""Load a module that is not a package's (an Ansible filter plugin, a role's host script) from its file."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load(relative: str, name: str | None = None) -> ModuleType:
    """The module at ``REPO / relative``, executed fresh."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(name or path.stem.replace("-", "_"), path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
