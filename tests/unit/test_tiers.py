"""Every collected test is in exactly one tier: ``fast`` (``scripts/test --fast``) or ``slow`` (the rest of the
whole suite). The markers come from tests/conftest.py; this checks what pytest's own ``-m`` selects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import LATE_GROUP, LATE_HOST, LATE_LAST, SECOND_HOST, systemd_modules, tier, xdist_scope

REPO = Path(__file__).resolve().parents[2]


def test_every_collected_test_is_in_exactly_one_tier() -> None:
    # both tiers, neither, or a lab test in the fast tier: none may be collected
    wrong = "(fast and slow) or not (fast or slow) or (fast and (integration or systemd))"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", wrong, "tests"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    # exit 5: nothing selected, and at least one test was deselected (so the collection itself worked)
    assert proc.returncode == 5 and " deselected" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_tier_rule() -> None:
    assert tier("tests/unit/test_fit.py", ["tmp_path"], ["parametrize"]) == "fast"
    assert tier("tests/unit/test_units.py", [], ["slow"]) == "slow"                   # marked by hand
    assert tier("tests/unit/test_x.py", ["tmp_path", "start_server"], []) == "slow"  # needs a llama-server
    assert tier("tests/unit/test_x.py", ["labhost"], []) == "slow"                   # needs the systemd host
    assert tier("tests/unit/test_x.py", [], ["integration"]) == "slow"
    assert tier("tests/integration/test_labhost.py", [], []) == "slow"
    assert tier("tests/backends/test_cuda.py", [], []) == "slow"


def test_worker_groups() -> None:
    systemd = systemd_modules(REPO)
    # the modules that boot lab hosts, found by their pytestmark
    assert {"tests/integration/test_deploy.py", "tests/integration/test_fleet.py",
            "tests/integration/test_live_host.py", "tests/integration/test_labhost.py"} <= systemd
    assert "tests/integration/test_soak.py" not in systemd and "tests/unit/test_tiers.py" not in systemd
    assert xdist_scope("tests/integration/test_deploy.py::test_x[a]", systemd) == "systemd-hosts-1"
    assert xdist_scope("tests/integration/test_fleet.py::test_v", systemd) == "systemd-hosts-2"
    assert xdist_scope("tests/integration/test_soak_systemd.py::test_u", systemd) == LATE_GROUP
    # the second and late streams name systemd modules only (a renamed module would silently join the first)
    assert SECOND_HOST.issubset(systemd), SECOND_HOST - systemd
    assert LATE_HOST.issubset(systemd) and not LATE_HOST & SECOND_HOST, LATE_HOST - systemd
    assert LATE_LAST <= LATE_HOST
    assert xdist_scope("tests/integration/test_soak.py::test_y", systemd) == "local-lab"
    assert xdist_scope("tests/backends/test_cuda.py::test_z", systemd) == "local-lab"
    assert xdist_scope("tests/unit/test_fit.py::test_w", systemd) == "tests/unit/test_fit.py::test_w"


def test_the_late_stream_goes_out_after_every_other_group() -> None:
    from collections import OrderedDict

    from tests.conftest import GroupScheduling

    class Node:   # what the scheduler calls on a worker: here, nothing happens
        def send_runtest_some(self, indexes: list[int]) -> None:
            pass

    groups = ["systemd-hosts-1", "systemd-hosts-2", "local-lab", LATE_GROUP, "tests/unit/a.py::t", "tests/unit/b.py::t"]
    sched = object.__new__(GroupScheduling)   # the scheduler's own state, without an xdist session around it
    sched.workqueue = OrderedDict((g, {f"{g}::{i}": False for i in range(2)}) for g in groups)
    nodes = [Node() for _ in range(4)]
    sched.assigned_work = {n: {} for n in nodes}
    sched.registered_collections = {n: [t for g in groups for t in (f"{g}::0", f"{g}::1")] for n in nodes}
    for n in nodes:                                   # the first hand-out: one group a worker, the late one held back
        sched._assign_work_unit(n)
    assert [next(iter(sched.assigned_work[n])) for n in nodes] == [*groups[:3], "tests/unit/a.py::t"]
    sched._assign_work_unit(nodes[3])
    assert list(sched.workqueue) == [LATE_GROUP]     # every other group is out
    sched._assign_work_unit(nodes[2])
    assert LATE_GROUP in sched.assigned_work[nodes[2]] and not sched.workqueue
