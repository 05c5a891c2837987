"""Filters for roles/deploy_lock (specops.runlock): this run's holder record, and whether a lock's holder is a dead
run of this controller."""

from __future__ import annotations

from typing import Any

from specops import runlock


def this_run(_: Any = None) -> dict[str, Any]:
    return runlock.this_run()


def dead_run(holder: Any) -> str:
    return runlock.dead_run(holder)


FILTERS = {
    "specops_this_run": this_run,
    "specops_dead_run": dead_run,
}
