"""Load a module that is not a package's (an Ansible filter plugin) from its file. The host scripts are the
package's specops.host: import them, or run them as a host does with tests/unit/hostcode.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

REPO = Path(__file__).resolve().parents[2]


def load(relative: str, name: str | None = None) -> ModuleType:
    """The module at ``REPO / relative``, executed fresh."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(name or path.stem.replace("-", "_"), path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plugin_filters(name: str) -> SimpleNamespace:
    """The filters of plugins/filter/NAME.py, loaded as Ansible loads it, as attributes named as the roles call them
    (``plugin_filters("specops").specops_argv``)."""
    plugin = load(f"plugins/filter/{name}.py", f"specops_filter_plugin_{name}")
    return SimpleNamespace(**plugin.FilterModule().filters())
