"""Load a module that is not a package's (an Ansible filter plugin, a role's host script) from its file."""

from __future__ import annotations

import importlib.util
import io
import sys
import zipapp
from pathlib import Path
from types import ModuleType, SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
HOST_FILES = REPO / "roles" / "llama_server" / "files"


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


def host_script(name: str) -> ModuleType:
    """roles/llama_server/files/NAME.py, executed fresh, finding the modules it shares (hostlib.py, keyfile.py)
    beside it as ``python3 NAME.py`` does (its directory on sys.path, last)."""
    if str(HOST_FILES) not in sys.path:
        sys.path.append(str(HOST_FILES))
    return load(f"roles/llama_server/files/{name}.py", name)


def host_scripts_zip() -> bytes:
    """roles/llama_server/files zipped as the deploy zips them (roles/llama_server/tasks/host_scripts.yml): what
    ``python3 ZIP SCRIPT ARGS`` runs on a host."""
    buf = io.BytesIO()
    zipapp.create_archive(HOST_FILES, buf, filter=lambda p: p.suffix == ".py")
    return buf.getvalue()
