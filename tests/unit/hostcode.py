"""The host code (specops.host) run as the deploy runs it on a host: from the zip specops.hostzip builds (what
roles/specops_package/tasks/host_scripts.yml builds and ships), by a python3 that sees the standard library only
(``-I -S``: no PYTHONPATH, no user or site packages, so no venv and no installed specops either)."""

from __future__ import annotations

import atexit
import functools
import shutil
import sys
import tempfile
from pathlib import Path

from specops import hostzip

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "specops"   # this checkout's, whichever specops the test's python has installed
BARE = [sys.executable, "-I", "-S"]   # the standard library only


@functools.cache
def zip_path() -> Path:
    """The zip of this checkout's specops.host, built once per test process as the role builds it."""
    where = Path(tempfile.mkdtemp(prefix="specops-host-scripts-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    return hostzip.build(where, PACKAGE)


def zip_bytes() -> bytes:
    return zip_path().read_bytes()


def argv(script: str, *args: str) -> list[str]:
    """The command line that runs host script ``script`` (drain, probe, ...) with ``args``, as on a host."""
    return [*BARE, str(zip_path()), script, *args]
