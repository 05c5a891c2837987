"""Which test a whole-suite run's CPU went to: process accounting joined to the suite's test timeline.

The suite is CPU-bound on two cores, so the wall minutes of a module (``scripts/suite-groups LOG``) say how long it
waited for a core as much as what it cost. Process accounting (``accton FILE``, the ``acct`` package) records every
process that ends: its command, CPU, start, lifetime, pid and parent pid, the lab hosts' processes included (one
kernel). Each process is walked up its parents (a pid is taken again within a run: the parent is the process of
that pid alive when the child started) to a pytest worker, and its CPU goes to the test that worker was running
when the process started (``SPECOPS_TEST_TIMELINE``, tests/conftest.py). A service started by one test and used by
the next is charged to the first: read a module's figure, not its tests', where a module shares its servers.
Processes still running when accounting stops are not in the file.
"""

from __future__ import annotations

import bisect
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

HZ = 100.0  # dump-acct prints times in clock ticks
UNATTRIBUTED = "(no test: its parents end outside the workers)"
WORKERS = "(the pytest processes themselves)"


@dataclass(frozen=True)
class Proc:
    comm: str
    cpu: float  # user + system, seconds
    start: float  # epoch seconds (to the second: dump-acct's resolution)
    life: float  # seconds
    pid: int
    ppid: int

    @property
    def end(self) -> float:
        return self.start + self.life


@dataclass(frozen=True)
class Test:
    worker: str
    pid: int
    start: float
    end: float
    nodeid: str

    @property
    def module(self) -> str:
        return self.nodeid.split("::", 1)[0]


def parse_acct(text: str) -> list[Proc]:
    """``dump-acct FILE`` lines (``comm|v3|utime|stime|etime|uid|gid|mem|io|pid|ppid|flags|exit|tty|start``)."""
    procs = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 15 or not f[9].isdigit():
            continue
        start = time.mktime(time.strptime(f[14], "%a %b %d %H:%M:%S %Y"))
        procs.append(Proc(f[0], (float(f[2]) + float(f[3])) / HZ, start, float(f[4]) / HZ, int(f[9]), int(f[10])))
    return procs


def read_acct(path: Path) -> list[Proc]:
    return parse_acct(subprocess.run(["dump-acct", str(path)], capture_output=True, text=True, check=True).stdout)


def parse_timeline(text: str) -> list[Test]:
    """SPECOPS_TEST_TIMELINE's lines: worker, pid, start, end, node id (tab-separated)."""
    tests = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 5:
            tests.append(Test(parts[0], int(parts[1]), float(parts[2]), float(parts[3]), parts[4]))
    return tests


class Attribution:
    """Each process's test (or None), by its parents."""

    SLACK = 1.0  # seconds: start times are whole seconds
    STARTUP = 600.0  # seconds: a worker starts (and its children may) before its first test, while it collects

    def __init__(self, procs: list[Proc], tests: list[Test]) -> None:
        self.by_pid: dict[int, list[Proc]] = defaultdict(list)
        for p in procs:
            self.by_pid[p.pid].append(p)
        self.workers = {t.pid: t.worker for t in tests}
        self.runs: dict[str, list[Test]] = defaultdict(list)
        for t in sorted(tests, key=lambda t: t.start):
            self.runs[t.worker].append(t)
        self.starts = {w: [t.start for t in runs] for w, runs in self.runs.items()}

    def is_worker(self, p: Proc) -> bool:
        """``p`` is a pytest worker itself (its pid, alive across that worker's first test)."""
        worker = self.workers.get(p.pid)
        return worker is not None and p.start <= self.starts[worker][0] + self.SLACK <= p.end + self.SLACK

    def parent(self, p: Proc) -> Proc | None:
        """The process with ``p``'s parent pid that was alive when ``p`` started (the latest such)."""
        alive = [q for q in self.by_pid.get(p.ppid, ())
                 if q is not p and q.start <= p.start + self.SLACK and q.end >= p.start - self.SLACK]
        return max(alive, key=lambda q: q.start, default=None)

    def worker(self, p: Proc) -> str | None:
        seen = 0
        cur: Proc | None = p
        while cur is not None and seen < 100:
            worker = self.workers.get(cur.ppid)
            runs = self.runs.get(worker or "")
            if runs and runs[0].start - self.STARTUP <= cur.start <= runs[-1].end:
                return worker
            cur, seen = self.parent(cur), seen + 1
        return None

    def test(self, p: Proc) -> Test | None:
        worker = self.worker(p)
        if worker is None:
            return None
        i = bisect.bisect_right(self.starts[worker], p.start + self.SLACK) - 1
        return self.runs[worker][i] if i >= 0 else None


@dataclass
class Costs:
    total: float
    by_test: dict[str, float]
    by_module: dict[str, float]
    by_module_command: dict[str, dict[str, float]]


def attribute(procs: list[Proc], tests: list[Test]) -> Costs:
    """CPU seconds by test and by module (and each module's by command); the workers' own CPU and what no worker
    started under their own keys."""
    att = Attribution(procs, tests)
    by_test: dict[str, float] = defaultdict(float)
    by_module: dict[str, float] = defaultdict(float)
    by_cmd: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in procs:
        if att.is_worker(p):
            key = WORKERS
        elif (t := att.test(p)) is None:
            key = UNATTRIBUTED
        else:
            by_test[t.nodeid] += p.cpu
            key = t.module
        by_module[key] += p.cpu
        by_cmd[key][p.comm] += p.cpu
    return Costs(sum(p.cpu for p in procs), dict(by_test), dict(by_module), {k: dict(v) for k, v in by_cmd.items()})
