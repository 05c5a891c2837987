"""Where a deploy's wall time went, by phase: the compile, the models, the tune, the speed gate and the rest of the
deploy, printed as one line at the end of the run (and written as JSON where ``SPECOPS_PHASES_FILE`` names a file).

A task's wall time is from its start to the next task's start (a play's start, a handler's, the end of the run), so
the phases add up to the run's wall time; on a fleet a task's time is counted once, however many hosts ran it. The
phase is read from the file the task comes from (``roles/<role>/tasks/<file>.yml``): the ``llama_cpp`` role is the
compile (its source, build and install), the ``models`` role the models (fetch, check, copy), the
``llama_server_tune`` role the tune and the ``llama_server_speed_gate`` role the speed gate (with the fallback
``llama_server`` carries out for it); everything else (preflight, lock, units,
start, proof, exporter, monitoring, load balancer, gathering facts) is the rest of the deploy."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: specops_phases
type: aggregate
short_description: one line at the end of a run, the wall time by phase (compile, models, tune, speed gate, rest)
description:
  - Times every task from its start to the next one's and sums the times by the phase its task file belongs to.
    Prints one line at the end of the run; with SPECOPS_PHASES_FILE set, also writes the figures there as JSON.
requirements:
  - enabled in ansible.cfg (callbacks_enabled)
"""

REST = "rest of the deploy"
#: phases in the order the line prints them; a task's phase is the first whose pattern its task file matches
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("compile", re.compile(r"/roles/llama_cpp/")),
    ("models", re.compile(r"/roles/models/")),
    ("tune", re.compile(r"/roles/llama_server_tune/tasks/[^/]*\.yml")),
    # (the speed gate's fallback: reinstall.yml installs, restarts and proves it; plain_unit.yml renders the plain unit)
    ("speed gate", re.compile(r"/roles/llama_server_speed_gate/tasks/[^/]*\.yml"
                              r"|/roles/llama_server/tasks/(reinstall|plain_unit)\.yml")),
)


def phase_of(path: str) -> str:
    """The phase of a task from its file (``Task.get_path()``: ``<file>:<line>``); the rest of the deploy when none."""
    for name, pattern in PHASES:
        if pattern.search(path):
            return name
    return REST


def summary(seconds: dict[str, float]) -> str:
    """The end-of-run line: each phase that took time, in order, then the total."""
    order = [name for name, _ in PHASES] + [REST]
    parts = [f"{name} {seconds[name]:.0f} s" for name in order if seconds.get(name, 0.0) >= 0.5]
    total = sum(seconds.values())
    return f"Wall time by phase: {', '.join(parts) or 'nothing'} (total {total:.0f} s)"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "specops_phases"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._seconds: dict[str, float] = {}
        self._phase = REST
        self._since: float | None = None

    def _switch(self, phase: str) -> None:
        now = time.monotonic()
        if self._since is not None:
            self._seconds[self._phase] = self._seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._switch(REST)

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._switch(REST)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._switch(phase_of(task.get_path() or ""))

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._switch(phase_of(task.get_path() or ""))

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._switch(REST)
        seconds = {name: round(value, 1) for name, value in self._seconds.items()}
        self._display.display(summary(seconds))
        target = os.environ.get("SPECOPS_PHASES_FILE")
        if target:
            with open(target, "w", encoding="utf-8") as fh:
                json.dump(seconds, fh)
