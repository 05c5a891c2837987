"""Ansible's default screen output, with one change: a task that polls something long-running (``until``) and
whose command answers JSON with a ``progress`` line shows that line when it moves, instead of "FAILED - RETRYING"
at every look.

The tune's poll (``roles/llama_server_tune/tasks/run.yml``: ``specops.tune.unit poll``) looks every 15 s for up to its
budget: the default callback printed "FAILED - RETRYING: ... (40 retries left)" at each look, which reads as a
failure and says nothing of where the tune is. Here each look prints the tune's own progress line (its phase, the
candidate or the figures so far, the time left) when it changed since the last look, and nothing when it did not.
Every other retry (a command without a progress line) prints what the default callback prints."""

from __future__ import annotations

import json
from typing import Any

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = """
name: specops_default
type: stdout
short_description: the default output, with a polled task's own progress line instead of "FAILED - RETRYING"
description:
  - Ansible's default stdout callback. A retried task (until) whose command printed JSON with a "progress" line
    shows that line when it changed, instead of "FAILED - RETRYING" at every look.
extends_documentation_fragment:
  - default_callback
  - result_format_callback
requirements:
  - set as stdout_callback in ansible.cfg
"""


def progress_line(result: dict[str, Any]) -> str | None:
    """The ``progress`` line a polling command printed as JSON on stdout, or None (not such a command)."""
    try:
        data = json.loads(str(result.get("stdout") or ""))
    except ValueError:
        return None
    line = data.get("progress") if isinstance(data, dict) else None
    return line.strip().splitlines()[-1] if isinstance(line, str) and line.strip() else None


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "specops_default"

    def __init__(self) -> None:
        super().__init__()
        self._last_progress: dict[str, str] = {}

    def v2_runner_retry(self, result) -> None:  # type: ignore[no-untyped-def]
        line = progress_line(result._result)
        if line is None:
            super().v2_runner_retry(result)
            return
        host = self.host_label(result)
        if self._last_progress.get(host) != line:
            self._last_progress[host] = line
            self._display.display(f"   ... [{host}] {line}", color=C.COLOR_DEBUG)
