"""Shared fixtures. The lab (see tests/lab.py) gives every integration test a real llama-server."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from specops.profile import ServerProfile
from specops.server import ServerProcess
from tests import lab

pytest_plugins = ["tests.labhost_fixture"]

# No per-example deadline: the suite runs beside other work (four xdist workers on two cores, or a CPU hog), where
# a slow example is load, not a bug; the properties are what the tests assert.
settings.register_profile("specops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("specops")

# every Python the suite starts on the controller keeps the code it compiles from Ansible's module zips (the modules
# the controller runs itself), as the lab hosts do: tests/lab.py controller_zipcache
os.environ.update(lab.controller_zipcache())

# Tiers (``scripts/test --fast`` runs ``-m fast``; ``scripts/test`` runs both). Every test gets exactly one of
# the two markers here, so nobody has to remember: ``slow`` when it needs the lab (a built llama-server, a real
# model, the systemd host), lives outside tests/unit, or is marked ``@pytest.mark.slow`` by hand; ``fast`` otherwise.
LAB_FIXTURES = frozenset({"llama_build", "smollm", "start_server", "labhost"})
LAB_MARKERS = frozenset({"integration", "systemd", "slow"})


# The whole suite runs on four xdist workers (scripts/test: ``-n 4 --dist loadgroup``, scheduled by
# ``pytest_xdist_make_scheduler`` below): the test modules that boot systemd lab hosts run as streams, each on a
# worker and a lab host of its own (tests/labhost_fixture.py names the host after the worker), its modules in file
# order; every other lab test (local llama-servers, Prometheus, exporters on free ports) on a third worker; the fast
# tier on the fourth (xdist hands the biggest groups out first, one per worker). Two streams start at once; the third
# (LATE_HOST) starts only when no other group is left to hand out -- when the fast tier and the local lab are done,
# about half-way, and the two cores would otherwise idle while the two streams finish their deploys one after the
# other (three streams from the start were slower: 13 m 01 s against 12 m 32 s, every deploy slowed by the others).
# Every systemd module starts with a deploy of the state it needs, so a module may run on any host. The lab tests
# mostly wait on deploys and model loads, and every lab llama-server runs one thread
# (tests/fixtures/deploy/smollm.yml), so two cores hold the four.
# The scheduler runs in the controller, which sees node ids only: a module is a systemd-host module when its text
# marks anything ``pytest.mark.systemd``; collection refuses a test that uses the lab host in any other module.
SYSTEMD_FIXTURES = frozenset({"labhost"})
# The streams, sized by each module's time in a whole run (04114c9, idle, 51 m 13 s: the first stream alone took all
# of it -- test_tune_deploy 19.0 min, test_live_host 10.8, test_deploy 8.9, test_operator_faults 5.0 -- while the second
# took 21.4, the late one 10.4, the local lab 12.6 and the fast tier 9.9): test_live_host moved to the second stream.
# (Moving test_operator_faults and test_restart_window to the late one as well ran the whole suite in 39 m 53 s, but
# put the soak's restart fault at the run's busiest minutes, three streams deploying at once: its systemctl restart
# timed out.) LATE_HOST's on the third, every other systemd module on the first. The next whole run (9f0313c, idle,
# 47 m 22 s) still had the first stream as the run: 47.1 min of modules (test_tune_deploy 16.3, test_deploy 10.9,
# test_operator_faults 7.9) against 31.6 for the second (test_fleet 11.6, test_deploy_inputs 9.6, test_live_host 8.5),
# 11.3 for the late one: test_operator_faults moved to the second stream (about 39 and 40 min of modules each).
# The whole run of 2375b16 (2026-12-02, 33 m 41 s) had both streams as the run (33.3 and 32.3 min of modules) while the
# late one took 7.9 and started about 11 minutes in: test_mtp_deploy, test_eagle3_deploy and test_tags (5.5 min)
# moved to the late stream, test_tabbyapi_deploy (1.3) to the first.
# The whole run of 2e2081b (2026-12-03, 28 m 22 s; process accounting: the lab hosts' lifetimes) had the second stream
# as the run (28.2 min of modules: test_fleet 15.0, test_deploy_inputs 5.6, test_live_host 4.4, test_operator_faults
# 3.2) while the late one started 11 minutes in and ended 7 minutes before the run: test_operator_faults moved to the
# late stream, last in it (LATE_LAST: after the soak, whose restart fault must not meet more deploys than before).
SECOND_HOST = frozenset({"tests/integration/test_deploy_inputs.py", "tests/integration/test_fleet.py",
                         "tests/integration/test_live_host.py"})
LATE_HOST = frozenset({"tests/integration/test_monitoring_systemd.py", "tests/integration/test_soak_systemd.py",
                       "tests/integration/test_labhost.py", "tests/integration/test_mtp_deploy.py",
                       "tests/integration/test_eagle3_deploy.py", "tests/integration/test_tags.py",
                       "tests/integration/test_rpc_deploy.py", "tests/integration/test_operator_faults.py"})
LATE_LAST = frozenset({"tests/integration/test_operator_faults.py"})
LATE_GROUP = "systemd-hosts-3"
SYSTEMD_MODULE = re.compile(r"\bpytest\.mark\.systemd\b")
ROOT = Path(__file__).resolve().parent.parent


def systemd_modules(root: Path = ROOT) -> frozenset[str]:
    """Test files (repo-relative, "/"-separated) that mark a test (or the module) ``pytest.mark.systemd``."""
    return frozenset(p.relative_to(root).as_posix() for p in sorted((root / "tests").rglob("test_*.py"))
                     if SYSTEMD_MODULE.search(p.read_text(encoding="utf-8")))


def xdist_scope(nodeid: str, systemd: frozenset[str]) -> str:
    """The worker group of a test: ``"systemd-hosts-1"``, ``-2`` or ``-3``, ``"local-lab"``, or the test itself (the
    fast tier)."""
    path = nodeid.split("::", 1)[0]
    if path in systemd:
        return LATE_GROUP if path in LATE_HOST else "systemd-hosts-2" if path in SECOND_HOST else "systemd-hosts-1"
    return nodeid if path.startswith("tests/unit/") else "local-lab"


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pragma: no cover - the suite then runs in one process
    LoadScopeScheduling = None


if LoadScopeScheduling is not None:
    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc, valid-type]
        """xdist's loadscope with the groups above (xdist's own ``xdist_group`` marker cannot move node ids
        under pytest >= 9.2)."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.systemd = systemd_modules()

        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid, self.systemd)

        def _assign_work_unit(self, node: Any) -> None:
            # the late stream goes out last: behind every other group still waiting
            if next(iter(self.workqueue)) == LATE_GROUP and len(self.workqueue) > 1:
                self.workqueue.move_to_end(LATE_GROUP)
            super()._assign_work_unit(node)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        return GroupScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


def tier(path: str, fixtures: Iterable[str], markers: Iterable[str]) -> str:
    """``"slow"`` or ``"fast"`` for a test at ``path`` (relative to the repo root, "/"-separated)."""
    if LAB_MARKERS.intersection(markers) or LAB_FIXTURES.intersection(fixtures) or not path.startswith("tests/unit/"):
        return "slow"
    return "fast"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    systemd = systemd_modules()
    for item in items:
        try:
            path = item.path.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            path = item.path.as_posix()
        fixtures = tuple(getattr(item, "fixturenames", ()))
        markers = tuple(m.name for m in item.iter_markers())
        name = tier(path, fixtures, markers)
        item.add_marker(name)
        if (SYSTEMD_FIXTURES.intersection(fixtures) or "systemd" in markers) and path not in systemd:
            raise pytest.UsageError(f"{item.nodeid} uses the systemd lab host: mark it (or its module) "
                                    "pytest.mark.systemd, so that scripts/test runs it on the lab hosts' worker")
    # a stream runs its modules in collection order: LATE_LAST's modules go after every other (a stable sort)
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] in LATE_LAST)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# SPECOPS_TEST_TIMELINE=FILE: each test's worker, its pid, start and end (setup to teardown) appended to FILE, one
# line a test, for scripts/suite-groups --acct (which process's CPU went to which test)
TIMELINE = os.environ.get("SPECOPS_TEST_TIMELINE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    start = time.time()
    yield
    if TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(TIMELINE, "a", encoding="utf-8") as fh:
            fh.write(f"{worker}\t{os.getpid()}\t{start:.2f}\t{time.time():.2f}\t{item.nodeid}\n")


@pytest.fixture(scope="session")
def llama_build() -> lab.LlamaBuild:
    """llama.cpp built through the real role (cached per machine), or $SPECOPS_LLAMA_PREFIX."""
    prefix = os.environ.get("SPECOPS_LLAMA_PREFIX")
    if prefix:
        return lab.build_at(Path(prefix))
    run = lab.build_llama_cpp()
    if run.rc != 0:
        pytest.fail(f"building llama.cpp through roles/llama_cpp failed:\n{run.output[-6000:]}")
    return lab.installed_build()


@pytest.fixture(scope="session")
def smollm() -> Path:
    """SmolLM2-135M (98 MB, from PyPI), sha256-verified."""
    return lab.model_path("smollm2-135m")


@pytest.fixture
def start_server(llama_build: lab.LlamaBuild, smollm: Path, tmp_path: Path,
                 request: pytest.FixtureRequest) -> Iterator[Callable[..., ServerProcess]]:
    """Factory: ``start_server(draft_model=..., spec_type=...)`` → a started ServerProcess on a free port.

    Profile keys default to SmolLM2 as target, small context, one thread (why: tests/fixtures/deploy/smollm.yml).
    Logs are kept and printed when the test fails.
    """
    started: list[ServerProcess] = []

    def _start(env: dict[str, str] | None = None, **overrides: Any) -> ServerProcess:
        profile = {"model": str(smollm), "ctx_size": 2048, "parallel": 1, "threads": 1, **overrides}
        server = ServerProcess(llama_build.server, ServerProfile.from_dict(profile), llama_build.caps,
                               log_path=tmp_path / f"llama-server-{len(started)}.log", env=env)
        started.append(server)
        server.start()
        return server

    yield _start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for server in started:
        server.stop()
        if failed:
            print(f"\n----- {server.log_path} (kept) -----\n{server.log_tail(60)}")


class Processes:
    """Helper processes a test starts (exporters, Prometheus); stopped in reverse order afterwards."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: Path, **kw: object) -> subprocess.Popen[bytes]:
        fh = log.open("wb")
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, **kw)  # type: ignore[call-overload]
        fh.close()
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture
def processes() -> Iterator[Processes]:
    p = Processes()
    yield p
    p.stop()
