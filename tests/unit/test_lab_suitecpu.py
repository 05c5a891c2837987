"""lab/specops_lab/suitecpu.py (scripts/suite-groups --acct): each process's CPU goes to the test its pytest worker
was running when it started, through its parents, a pid taken again within the run included; the real ``dump-acct``
line format and the suite's own timeline lines are read."""

from __future__ import annotations

import time

from specops_lab import suitecpu

T0 = time.mktime(time.strptime("Mon Dec  7 16:30:00 2026", "%a %b %d %H:%M:%S %Y"))


def line(comm: str, cpu_ticks: int, life_ticks: int, pid: int, ppid: int, at: float) -> str:
    """One ``dump-acct`` line as the acct package writes it (times in clock ticks; start to the second)."""
    start = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(T0 + at))
    return (f"{comm:<16}|v3|{cpu_ticks:9.2f}|{0:9.2f}|{life_ticks:9.2f}|     0|     0|  2476.00|     0.00|"
            f"{pid:8d}|{ppid:8d}|     |       0|__      |{start}")


TIMELINE = "\n".join([
    f"gw0\t100\t{T0 + 10:.2f}\t{T0 + 60:.2f}\ttests/integration/test_a.py::test_one",
    f"gw0\t100\t{T0 + 60:.2f}\t{T0 + 200:.2f}\ttests/integration/test_a.py::test_two",
    f"gw1\t101\t{T0 + 10:.2f}\t{T0 + 200:.2f}\ttests/integration/test_b.py::test_three",
    "a line that is not the timeline's",
])


def test_cpu_goes_to_the_test_whose_worker_started_the_process_through_its_parents() -> None:
    procs = suitecpu.parse_acct("\n".join([
        line("python", 3000, 25000, 100, 1, 0),          # worker gw0 itself
        line("python", 1000, 25000, 101, 1, 0),          # worker gw1 itself
        line("ansible-playboo", 500, 3000, 200, 100, 20),  # gw0's test_one: a deploy
        line("python3", 80, 1000, 300, 200, 25),         # its child
        line("llama-server", 4000, 10000, 301, 300, 30),  # a grandchild (a service started by test_one)
        line("sh", 10, 1000, 200, 101, 70),              # pid 200 again, later: gw1's, and its child below
        line("llama-server", 700, 5000, 302, 200, 75),
        line("ssh", 120, 20000, 400, 1, 5),              # re-parented to init: no worker
        "not an accounting line",
    ]))
    assert len(procs) == 8 and procs[2].cpu == 5.0 and procs[2].life == 30.0
    costs = suitecpu.attribute(procs, suitecpu.parse_timeline(TIMELINE))
    assert costs.by_test == {"tests/integration/test_a.py::test_one": 5.0 + 0.8 + 40.0,
                             "tests/integration/test_b.py::test_three": 0.1 + 7.0}
    assert costs.by_module == {suitecpu.WORKERS: 40.0, "tests/integration/test_a.py": 45.8,
                               "tests/integration/test_b.py": 7.1, suitecpu.UNATTRIBUTED: 1.2}
    assert costs.by_module_command["tests/integration/test_a.py"] == {"ansible-playboo": 5.0, "python3": 0.8,
                                                                      "llama-server": 40.0}
    assert round(costs.total, 6) == round(40.0 + 45.8 + 7.1 + 1.2, 6)


def test_a_process_started_within_a_test_goes_to_that_test_not_the_one_before() -> None:
    procs = suitecpu.parse_acct("\n".join([
        line("python", 3000, 25000, 100, 1, 0),
        line("llama-server", 900, 2000, 500, 100, 90),   # started during test_two
    ]))
    costs = suitecpu.attribute(procs, suitecpu.parse_timeline(TIMELINE))
    assert costs.by_test == {"tests/integration/test_a.py::test_two": 9.0}
