"""tests/lab.py clients_from: the clients start once the run's output reaches the marker (not before, and all of
them), stop with the caller's stack, and a run that never reaches it fails the test instead of starting them late."""

from __future__ import annotations

import contextlib
import threading

import pytest

from tests import lab


class Client:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def __enter__(self) -> Client:
        self.log.append(f"start {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(f"stop {self.name}")


def test_the_clients_start_at_the_marker_and_stop_with_the_stack() -> None:
    log: list[str] = []
    go_on = threading.Event()

    def run(on_line):
        for line in ("PLAY [Check every input first]\n", "TASK [a check]\n", f"{lab.SERVICE_PLAY} ****\n"):
            log.append(line.split()[0])
            on_line(line)
        go_on.wait(10)  # the rest of the run, while the clients are up
        log.append("drain")
        return lab.PlaybookRun(0, "done")

    clients = [Client(log, "a"), Client(log, "b")]
    with contextlib.ExitStack() as stack:
        stack.callback(go_on.set)
        threading.Timer(0.5, go_on.set).start()
        run_result = lab.clients_from(lab.SERVICE_PLAY, run, clients, stack)
        assert run_result.output == "done"
        assert log.index("start a") > log.index("PLAY", 1) and log.index("start b") > log.index("PLAY", 1)
        assert log[-1] == "drain" and "stop a" not in log
    assert log[-2:] == ["stop b", "stop a"]  # the stack's order


def test_a_run_that_never_reaches_the_marker_fails_and_starts_no_client() -> None:
    log: list[str] = []
    with contextlib.ExitStack() as stack, pytest.raises(AssertionError, match="before a line starting"):
        lab.clients_from(lab.SERVICE_PLAY, lambda on_line: lab.PlaybookRun(2, "refused in one line"),
                         [Client(log, "a")], stack)
    assert log == []
