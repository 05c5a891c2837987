"""specops.host.deploy_lock and specops.runlock: one deploy at a time per host (issue 40).

The host script runs as it does on a host (a subprocess, real files, real flock); two acquirers race for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specops import runlock
from tests.unit.hostcode import BARE, argv

pytestmark = pytest.mark.fast

SCRIPT = argv("deploy_lock")   # as roles/deploy_lock runs it on a host


def me(run: str, **extra) -> str:
    return json.dumps({"run_id": run, "controller": "ctl", "pid": 1, "pid_start": "1", "user": "root",
                       "started": "2026-11-26T20:00:00+0000", **extra})


def lock(*args: str, timeout: float = 30) -> tuple[int, dict]:
    proc = subprocess.run([*SCRIPT, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.stderr == "" or proc.stderr.startswith("waiting for run "), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_free_lock_is_taken_and_a_second_run_is_refused_after_its_timeout_naming_the_holder(tmp_path):
    path = str(tmp_path / "run" / "deploy.lock")
    rc, out = lock("acquire", "--lock", path, "--me", me("A"), "--timeout", "0")
    assert rc == 0 and out["acquired"] and out["took_over"] is None and out["path"] == path
    t0 = time.monotonic()
    rc, out = lock("acquire", "--lock", path, "--me", me("B"), "--timeout", "1.5")
    assert rc == 3 and not out["acquired"]
    assert out["holder"]["run_id"] == "A" and out["holder"]["controller"] == "ctl"
    assert time.monotonic() - t0 >= 1.5 and out["waited_s"] >= 1.5
    # the same run taking it again (the load balancer's play after the servers') keeps it
    rc, out = lock("acquire", "--lock", path, "--me", me("A"), "--timeout", "0")
    assert rc == 0 and out["already_held"]


def test_a_waiting_run_takes_the_lock_as_soon_as_the_holder_releases_it(tmp_path):
    path = str(tmp_path / "deploy.lock")
    assert lock("acquire", "--lock", path, "--me", me("A"), "--timeout", "0")[0] == 0
    waiter = subprocess.Popen([*SCRIPT, "acquire", "--lock", path, "--me", me("B"),
                               "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert waiter.stderr.readline().startswith(f"waiting for run A (pid 1 on controller ctl) to release {path}")
    # a release by another run changes nothing
    assert lock("release", "--lock", path, "--run-id", "B")[1] == {"released": False, "holder": json.loads(
        Path(path).read_text())}
    assert lock("release", "--lock", path, "--run-id", "A")[1] == {"released": True}
    out, _ = waiter.communicate(timeout=30)
    got = json.loads(out)
    assert waiter.returncode == 0 and got["acquired"] and got["waited_on"]["run_id"] == "A"
    assert json.loads(Path(path).read_text())["run_id"] == "B"


def test_racing_runs_never_both_take_it(tmp_path):
    path = str(tmp_path / "deploy.lock")
    procs = [subprocess.Popen([*SCRIPT, "acquire", "--lock", path, "--me", me(f"R{i}"),
                               "--timeout", "0"], stdout=subprocess.PIPE, text=True) for i in range(8)]
    results = [json.loads(p.communicate(timeout=30)[0]) for p in procs]
    winners = [r for r in results if r["acquired"]]
    assert len(winners) == 1
    assert all(r["holder"]["run_id"] == json.loads(Path(path).read_text())["run_id"]
               for r in results if not r["acquired"])


@pytest.mark.parametrize("case", ["dead run", "too old", "broken by hand", "unreadable"])
def test_a_stale_lock_is_taken_over_and_says_why(tmp_path, case):
    path = tmp_path / "deploy.lock"
    if case == "unreadable":
        path.write_text('{"run_id": "A", "contr')   # a run killed while writing it
    else:
        path.write_text(json.dumps({**json.loads(me("A")), "taken_at": time.time() - 7200}))
    extra = {"dead run": ["--dead-run", "A"], "too old": ["--stale-after", "3600"],
             "broken by hand": ["--break-lock"], "unreadable": []}[case]
    rc, out = lock("acquire", "--lock", str(path), "--me", me("B"), "--timeout", "0", *extra)
    assert rc == 0 and out["acquired"], out
    why = {"dead run": "no longer running", "too old": "specops_deploy_lock_stale_after",
           "broken by hand": "specops_deploy_lock_break=true", "unreadable": "unreadable lock file"}[case]
    assert why in out["took_over"]["why"]
    # and nothing stale otherwise: another dead run's id or a younger lock keeps it held
    rc, out = lock("acquire", "--lock", str(path), "--me", me("C"), "--timeout", "0", "--dead-run", "A",
                   "--stale-after", "3600")
    assert rc == 3 and out["holder"]["run_id"] == "B"


def test_runlock_knows_a_dead_run_of_this_controller_from_a_live_one():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mine = runlock.describe(os.getpid())
        other = runlock.describe(child.pid)
        assert other["pid_start"] and other["run_id"] != mine["run_id"]
        assert runlock.dead_run(other, mine) == ""                      # alive
        assert runlock.dead_run({**other, "pid_start": "1"}, mine) == other["run_id"]   # the PID was reused
        assert runlock.dead_run({**other, "controller": "elsewhere"}, mine) == ""       # cannot tell: wait
        assert runlock.dead_run(mine, mine) == ""                       # this very run
    finally:
        child.kill()
        child.wait()
    assert runlock.dead_run(other, mine) == other["run_id"]             # gone
    assert runlock.dead_run(None, mine) == "" and runlock.dead_run({"unreadable": True}, mine) == ""


def test_the_callback_releases_a_stopped_runs_lock_with_the_zips_deploy_lock(tmp_path, monkeypatch):
    """plugins/callback/specops_deploy_lock.py releases what a stopped run holds with an ad-hoc
    ansible.builtin.script of the host-scripts zip (specops.host.deploy_lock, as roles/deploy_lock runs it), built
    into $SPECOPS_CACHE/host-scripts; that command line releases the lock."""
    import shlex

    from tests.unit.by_path import load

    path = str(tmp_path / "run" / "deploy.lock")
    assert lock("acquire", "--lock", path, "--me", me("A"), "--timeout", "0")[0] == 0
    callback = load("plugins/callback/specops_deploy_lock.py", "specops_deploy_lock_callback")
    monkeypatch.setenv("SPECOPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(callback.context, "CLIARGS", {"inventory": ["inv.yml"]})
    ran: list[list[str]] = []
    monkeypatch.setattr(callback.subprocess, "run",
                        lambda cmd, **_kw: ran.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    assert callback.CallbackModule()._release(["h1"], path, "A") == (0, "")
    monkeypatch.undo()
    cmd = ran[0]
    assert cmd[1:4] == ["h1", "-m", "ansible.builtin.script"] and cmd[-2:] == ["-i", "inv.yml"], cmd
    script, *args = shlex.split(cmd[cmd.index("-a") + 1])
    assert Path(script).parent == tmp_path / "cache" / "host-scripts" and Path(script).name.endswith(".pyz")
    assert args[:2] == ["deploy_lock", "release"], args
    out = subprocess.run([*BARE, script, *args], capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == {"released": True} and not Path(path).exists()
