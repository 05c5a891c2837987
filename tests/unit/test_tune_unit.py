"""The deploy's side of the tune's transient unit (specops.tune.unit, issue 51): how a tune ended in one line, the
deploy's looks at it, and the sweep of what an interrupted deploy left (a fake /proc and systemctl here)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from specops.tune import unit

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
BUDGET = {"budget_min": 2, "grace_s": 72}


@pytest.mark.parametrize(("result", "code", "status", "out", "err", "rc", "line"), [
    ("success", "exited", "0", "| plain |\nchosen: plain", "", 0, ""),
    ("exit-code", "exited", "3", "unproven: busy", "", 3, ""),
    ("timeout", "killed", "TERM", "", "", None,
     "specops tune ran past its budget of 2 min + 72 s grace: stopped by systemd (its whole control group, probe "
     "servers included)"),
    ("timeout", "exited", "4", "stopped: terminated (SIGTERM)", "", 4,
     "specops tune ran past its budget of 2 min + 72 s grace: stopped by systemd (its whole control group, probe "
     "servers included)"),
    ("oom-kill", "killed", "KILL", "", "", None,
     "specops tune was killed for memory (OOM): the kernel's OOM killer ended it or one of its probe servers, and "
     "systemd stopped the rest"),
    ("signal", "killed", "KILL", "", "", None, "specops tune was killed by signal SIGKILL"),
    ("signal", "2", "9", "", "", None, "specops tune was killed by signal SIGKILL"),  # systemctl show's numbers
    ("core-dump", "dumped", "SEGV", "", "", None, "specops tune was killed by signal SIGSEGV (core dumped)"),
    ("exit-code", "exited", "4", "tune: probing\nstopped: no heartbeat from the deploy for 75 s (x); y was not written",
     "", 4, "specops tune stopped: no heartbeat from the deploy for 75 s (x); y was not written"),
    ("exit-code", "exited", "130", "", "", 130, "specops tune was interrupted (SIGINT: exit 130)"),
    ("exit-code", "exited", "2", "", "specops tune: llama-bench is missing; nothing was changed\n", 2,
     "specops tune: llama-bench is missing; nothing was changed"),
    ("exit-code", "exited", "1", "", "Traceback ...\n  File x\nValueError: boom\n", 1,
     "specops tune exited with 1: ValueError: boom"),
])
def test_how_a_tune_ended_in_one_line(result, code, status, out, err, rc, line):
    assert unit.why(result, code, status, out=out, err=err, **BUDGET) == (rc, line)


def test_the_units_stop_post_keeps_how_it_ended(tmp_path: Path):
    (tmp_path / "tune-run.err").write_text("")
    rec = unit.record_exit(tmp_path / "tune-exit.json", tmp_path / "tune-run.log", tmp_path / "tune-run.err", 2, 72,
                           env={"SERVICE_RESULT": "signal", "EXIT_CODE": "killed", "EXIT_STATUS": "INT"})
    assert json.loads((tmp_path / "tune-exit.json").read_text()) == rec
    assert (rec["result"], rec["rc"], rec["why"]) == ("signal", None, "specops tune was killed by signal SIGINT")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tune-exit.json", "tune-run.err"]


# -- the deploy's looks

class Systemctl:
    """systemctl as the tune's unit's state says (``others``: other services' states), and every call kept."""

    def __init__(self, others: dict[str, dict[str, str]] | None = None, **state: str) -> None:
        self.units = {"specops-tune.service": state, **(others or {})}
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        state = self.units.get(args[1], {"LoadState": "not-found", "ActiveState": "inactive", "MainPID": "0"})
        out = "\n".join(f"{k}={v}" for k, v in state.items()) if args[0] == "show" else ""
        if args[0] == "stop":
            state["ActiveState"] = "inactive"
        return subprocess.CompletedProcess(["systemctl", *args], 0, out, "")


class Time:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def _poll(tmp_path: Path, systemctl: Systemctl, t: Time | None = None, journal: str = "") -> dict:
    t = t or Time()
    return unit.poll("specops-tune", tmp_path / "run" / "tune-heartbeat", tmp_path / "tune-progress.txt",
                     tmp_path / "tune-exit.json", tmp_path / "tune-run.log", tmp_path / "tune-run.err", 15, 2, 72,
                     systemctl=systemctl, journal=lambda u: journal, clock=t.clock, sleep=t.sleep)


def test_a_look_at_a_running_tune_touches_the_heartbeat_and_says_its_progress(tmp_path: Path):
    (tmp_path / "tune-progress.txt").write_text("tune: probes — exact-ngram-mod (2/5) — 1:40 left\n")
    t = Time()
    res = _poll(tmp_path, Systemctl(LoadState="loaded", ActiveState="active", SubState="running"), t)
    assert res == {"done": False, "state": "active (running)",
                   "progress": "tune: probes — exact-ngram-mod (2/5) — 1:40 left"}
    assert t.now == 15  # waited for the end as long as it was asked to
    assert (tmp_path / "run" / "tune-heartbeat").exists()


@pytest.mark.parametrize(("log", "changed"), [("| plain |\nchosen: plain\n", True),
                                               ("| plain |\nchosen: plain\nreused: the result of x\n", False)])
def test_a_look_at_an_ended_tune_gives_its_status_its_line_and_its_output(tmp_path: Path, log, changed):
    (tmp_path / "tune-run.log").write_text(log)
    (tmp_path / "tune-exit.json").write_text(json.dumps({"result": "success", "rc": 0, "why": ""}))
    res = _poll(tmp_path, Systemctl(LoadState="not-found", ActiveState="inactive"))
    assert res["done"] and res["rc"] == 0 and res["why"] == "" and res["changed"] is changed
    assert res["stdout"] == log and res["stdout_lines"] == log.splitlines()


def test_a_unit_gone_without_its_record_is_said(tmp_path: Path):
    (tmp_path / "tune-run.err").write_text("python3: No module named specops\n")
    t = Time()
    res = _poll(tmp_path, Systemctl(LoadState="not-found", ActiveState="inactive", Result="success"), t)
    assert res["done"] and res["rc"] is None and t.now >= unit.SETTLE_S
    assert res["why"] == (f"specops tune's unit specops-tune ended without saying how ({tmp_path / 'tune-exit.json'} "
                          "was not written, and the journal has no end for it): python3: No module named specops")


# what systemd 252 logs for a transient unit in the lab (journalctl -u UNIT -o cat; checked on the demo host
# 2026-12-02): an earlier run killed, then this one: its main process ended 0 (systemd says nothing of an exit 0),
# its ExecStopPost was killed at its timeout
JOURNAL_OK = """Starting specops-tune.service - specops tune for deploy run 1...
Started specops-tune.service - specops tune for deploy run 1.
specops-tune.service: Main process exited, code=killed, status=9/KILL
specops-tune.service: Failed with result 'signal'.
Starting specops-tune.service - specops tune for deploy run 2...
Started specops-tune.service - specops tune for deploy run 2.
specops-tune.service: State 'stop-post' timed out. Terminating.
specops-tune.service: Control process exited, code=killed, status=15/TERM
specops-tune.service: Failed with result 'timeout'.
"""
JOURNAL_OOM = """Started specops-tune.service - specops tune for deploy run 3.
specops-tune.service: A process of this unit has been killed by the OOM killer.
specops-tune.service: Main process exited, code=killed, status=9/KILL
specops-tune.service: Failed with result 'oom-kill'.
"""
JOURNAL_LIMIT = """Started specops-tune.service - specops tune for deploy run 4.
specops-tune.service: Service reached runtime time limit. Stopping.
specops-tune.service: Failed with result 'timeout'.
"""


def test_a_unit_gone_without_its_record_is_read_from_the_journal(tmp_path: Path):
    """A collected unit whose ExecStopPost wrote nothing (CI, 2026-12-02: "ended without saying how"): systemd's
    journal says how the run ended. The tune's own exit 0 stands (its result is written: the deploy goes on); a kill
    for memory is said as one."""
    gone = Systemctl(LoadState="not-found", ActiveState="inactive")
    assert unit.from_journal(JOURNAL_OK)[:3] == ("success", "exited", "0")
    assert unit.from_journal(JOURNAL_LIMIT)[0] == "timeout"
    res = _poll(tmp_path, gone, journal=JOURNAL_OK)
    assert res["done"] and (res["rc"], res["why"]) == (0, "")
    res = _poll(tmp_path, gone, journal=JOURNAL_OOM)
    assert res["done"] and res["rc"] is None and "killed for memory (OOM)" in res["why"]
    failed = JOURNAL_OK.replace("Terminating.", "Terminating.\nspecops-tune.service: Main process exited, "
                                "code=exited, status=1/FAILURE")
    res = _poll(tmp_path, gone, journal=failed)
    assert res["rc"] == 1 and "its exit record was not written: State 'stop-post' timed out" in res["why"]
    res = _poll(tmp_path, gone, journal=JOURNAL_LIMIT)
    assert res["rc"] is None and "ran past its budget" in res["why"]


def test_a_failed_unit_still_loaded_is_read_from_systemd(tmp_path: Path):
    res = _poll(tmp_path, Systemctl(LoadState="loaded", ActiveState="failed", Result="signal", ExecMainCode="2",
                                    ExecMainStatus="9"))
    assert (res["rc"], res["why"]) == (None, "specops tune was killed by signal SIGKILL")


# -- the sweep

INSTALL = "/opt/llama.cpp"
OUT = "/etc/specops/tune.json"
SESSION = "0::/user.slice/user-0.slice/session-3.scope"
SSH = "0::/system.slice/ssh.service"  # over SSH without logind (the lab host), what Ansible started stays here


def _proc(root: Path, pid: int, ppid: int, exe: str, argv: list[str], cgroup: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({Path(exe).name[:15]}) S {ppid} {pid} {pid} 0 -1\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "cgroup").write_text(cgroup + "\n")
    (d / "exe").symlink_to(exe)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    server = f"{INSTALL}/b1/bin/llama-server"
    tune_argv = ["/usr/bin/python3", "-m", "specops", "tune", "--target", "/m/t.gguf", "--out", OUT, "--quiet"]
    _proc(root, 100, 1, server, [server, "--port", "40001"], SESSION)                   # orphan probe: swept
    _proc(root, 101, 1, server, [server, "--port", "8080"],
          "0::/system.slice/llama-server-speculative.service")                         # the service: kept
    _proc(root, 102, 555, server, [server, "--port", "9000"], SESSION)                  # a live shell's: kept
    _proc(root, 103, 1, "/usr/local/bin/llama-server", ["llama-server"], SESSION)       # not ours: kept
    _proc(root, 104, 1, "/usr/bin/python3.11", tune_argv, SSH)                          # a pre-unit tune: swept
    _proc(root, 105, 104, server, [server, "--port", "40002"], SSH)                     # its probe: swept
    _proc(root, 106, 1, "/usr/bin/python3.11", [*tune_argv[:6], "--out", "/tmp/mine.json"], SESSION)  # kept
    _proc(root, 107, 300, server, [server], "0::/system.slice/specops-tune.service")    # in the tune's unit: swept
    _proc(root, 108, 1, f"{INSTALL}/b0/bin/llama-bench (deleted)", ["llama-bench"], SESSION)  # an old build's: swept
    _proc(root, 109, 1, "/usr/bin/python3.11", ["/usr/bin/python3", "-m", "specops.tune.unit", "sweep",
                                                 f"--out={OUT}"], SESSION)              # the sweep itself: kept
    _proc(root, 110, 1, server, [server, "--port", "40003"], SSH)                       # orphan over SSH: swept
    _proc(root, 111, 1, server, [server, "--port", "7000"], "0::/system.slice/my-llm.service")  # its own unit's: kept
    return root


SERVICES = {"llama-server-speculative.service": {"MainPID": "101"}, "ssh.service": {"MainPID": "50"},
            "my-llm.service": {"MainPID": "111"}}


def _kill(root: Path, kills: list[tuple[int, int]]):
    def kill(pid: int, sig: int) -> None:
        kills.append((pid, sig))
        stat = root / str(pid) / "stat"
        stat.write_text(stat.read_text().replace(") S ", ") Z "))  # it dies at the first signal
    return kill


def test_the_sweep_stops_what_an_interrupted_deploy_left_and_says_so(tmp_path: Path, proc: Path):
    systemctl = Systemctl(SERVICES, LoadState="loaded", ActiveState="active", MainPID="300",
                          ActiveEnterTimestamp="Fri 2026-11-27 10:00:00 UTC", Description="specops tune for run x")
    kills: list[tuple[int, int]] = []
    stale = [tmp_path / "tune-exit.json", tmp_path / "tune-run.log"]
    for path in stale:
        path.write_text("old")
    res = unit.sweep("specops-tune", INSTALL, OUT, tmp_path / "run" / "tune-heartbeat", stale, root=proc,
                     systemctl=systemctl, kill=_kill(proc, kills), sleep=lambda s: None, mine={109})
    assert res["message"] == ("stopped a leftover tune (specops-tune, started Fri 2026-11-27 10:00:00 UTC) and 1 "
                              "`specops tune` outside its unit (pid 104) and 5 probe server(s) (pid 100, 105, 107, "
                              "108, 110) from an interrupted deploy")
    assert ("stop", "specops-tune.service") in systemctl.calls
    assert ("reset-failed", "specops-tune.service") in systemctl.calls
    assert [pid for pid, _ in kills] == [104, 100, 105, 107, 108, 110]  # the tune first: it starts no server after
    assert not any(p.exists() for p in stale) and (tmp_path / "run" / "tune-heartbeat").exists()


def test_a_clean_host_has_nothing_to_sweep(tmp_path: Path):
    root = tmp_path / "proc"
    _proc(root, 101, 1, f"{INSTALL}/b1/bin/llama-server", ["llama-server"],
          "0::/system.slice/llama-server-speculative.service")
    systemctl = Systemctl(SERVICES, LoadState="not-found", ActiveState="inactive")
    res = unit.sweep("specops-tune", INSTALL, OUT, None, root=root, systemctl=systemctl,
                     kill=lambda pid, sig: pytest.fail(f"killed {pid}"), mine=set())
    assert res == {"message": "", "unit": None, "tunes": [], "servers": []}
    assert [c[0] for c in systemctl.calls] == ["show", "show"]  # the tune's unit; the service's main process


def test_a_server_that_ignores_sigterm_gets_sigkill(tmp_path: Path):
    root = tmp_path / "proc"
    _proc(root, 100, 1, f"{INSTALL}/b1/bin/llama-server", ["llama-server"], SESSION)
    kills: list[tuple[int, int]] = []

    def stubborn(pid: int, sig: int) -> None:
        kills.append((pid, sig))
        if sig == 9:
            _kill(root, [])(pid, sig)

    t = Time()
    unit.terminate([100], root=root, kill=stubborn, wait_s=10, sleep=t.sleep, clock=t.clock)
    assert kills == [(100, 15), (100, 9)] and t.now >= 10


@pytest.mark.parametrize(("text", "path", "service"), [
    ("0::/system.slice/specops-tune.service\n", "/system.slice/specops-tune.service", "specops-tune.service"),
    ("12:memory:/x\n1:name=systemd:/system.slice/a.service/sub\n", "/system.slice/a.service/sub", "a.service"),
    (SESSION, "/user.slice/user-0.slice/session-3.scope", ""),
    ("0::/\n", "/", ""),
])
def test_control_groups(text, path, service):
    assert unit.cgroup_path(text) == path and unit.service_of(path) == service


def _every_task(node: object):
    """Every task and block of a parsed task file, nested ones (block, rescue, always) included."""
    if isinstance(node, list):
        for item in node:
            yield from _every_task(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from _every_task(node.get(key) or [])


def test_the_role_calls_the_unit_helper_with_flags_it_has():
    """roles/llama_server_tune/tasks/*.yml's sweep (prepare.yml), poll and ExecStopPost (run.yml) command lines
    against this module's parser (a flag it does not have would fail every deploy's tune)."""
    files = sorted((REPO / "roles" / "llama_server_tune" / "tasks").glob("*.yml"))
    assert {f.name for f in files} >= {"main.yml", "prepare.yml", "run.yml", "result.yml"}
    text = "\n".join(f.read_text() for f in files)
    argvs = [t["ansible.builtin.command"]["argv"] for f in files for t in _every_task(yaml.safe_load(f.read_text()))
             if isinstance(t.get("ansible.builtin.command", {}).get("argv"), list)]
    stop_post = re.search(r"--property=ExecStopPost=(.*?)\n\s+- --setenv", text, re.S)
    assert stop_post
    argvs.append(re.sub(r"\{\{.*?\}\}", "1", stop_post.group(1)).split())
    seen = set()
    for argv in argvs:
        argv = [re.sub(r"\{\{.*?\}\}", "1", a) for a in argv]
        if "specops.tune.unit" not in argv:  # systemctl reset-failed, before the start
            continue
        i = argv.index("specops.tune.unit")
        unit.build_parser().parse_args(argv[i + 1:])
        seen.add(argv[i + 1])
    assert seen == {"sweep", "poll", "exit"}
