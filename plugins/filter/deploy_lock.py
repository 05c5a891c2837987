"""Filters for roles/deploy_lock: this run's holder record and whether a lock's holder is a dead run of this
controller (specops.runlock)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from specops import runlock


def specops_this_run(_: Any = None) -> dict[str, Any]:
    return runlock.this_run()


def specops_dead_run(holder: Any) -> str:
    return runlock.dead_run(holder)


class FilterModule:
    def filters(self) -> dict:
        return {"specops_this_run": specops_this_run, "specops_dead_run": specops_dead_run}
