"""Measurement only (lab equipment, never shipped): each playbook run's tasks appended to ``$TASKTIMER_FILE`` as TSV.

Enable it beside the repo's callbacks, e.g. for a whole suite run::

    ANSIBLE_CALLBACK_PLUGINS="$PWD/plugins/callback:$PWD/lab/callbacks" \\
    ANSIBLE_CALLBACKS_ENABLED="specops_preload,specops_deploy_lock,specops_phases,tasktimer" \\
    TASKTIMER_FILE=/tmp/tasks.tsv scripts/test

One ``RUN`` line per playbook run (id, the test that ran it from ``PYTEST_CURRENT_TEST``, the playbook, its wall
seconds, the main process's CPU seconds), then one ``T`` line per task (run id, wall seconds from its start to the
next task's, ok, changed, skipped and failed host results, the task's path:line and name). docs/measurements.md
(tenth session) reads these.
"""

from __future__ import annotations

import fcntl
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tasktimer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[float, str, dict[str, int]]] = []
        self.cur: str | None = None
        self.t0 = 0.0
        self.start = time.monotonic()
        self.counts: dict[str, int] = {}
        self.test = os.environ.get("PYTEST_CURRENT_TEST", "-").split(" ")[0]
        self.book = "-"

    def v2_playbook_on_start(self, playbook) -> None:
        self.book = os.path.basename(playbook._file_name)

    def _close(self) -> None:
        if self.cur is not None:
            self.rows.append((time.monotonic() - self.t0, self.cur, self.counts))
            self.cur, self.counts = None, {}

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def v2_runner_on_ok(self, result) -> None:
        self._count("changed" if result._result.get("changed") else "ok")

    def v2_runner_on_skipped(self, result) -> None:
        self._count("skipped")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._count("failed")

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self._close()
        self.cur = f"{task.get_path()}\t{task.get_name()}"
        self.t0 = time.monotonic()

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_stats(self, stats) -> None:
        self._close()
        path = os.environ.get("TASKTIMER_FILE")
        if not path:
            return
        rid = f"{os.getpid()}-{int(time.time())}"
        cpu = os.times().user + os.times().system
        lines = [f"RUN\t{rid}\t{self.test}\t{self.book}\t{time.monotonic() - self.start:.3f}\t{cpu:.2f}\n"]
        for dt, name, c in self.rows:
            counts = "\t".join(str(c.get(k, 0)) for k in ("ok", "changed", "skipped", "failed"))
            lines.append(f"T\t{rid}\t{dt:.3f}\t{counts}\t{name}\n")
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write("".join(lines))
