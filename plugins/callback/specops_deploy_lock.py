"""The deploy lock's controller half: names this run, and releases what a run that stopped early still holds.

At the playbook's start it puts this run's holder record (controller, ansible-playbook's PID and its start time)
in ``SPECOPS_RUN`` for roles/deploy_lock. It notes every host where a "Take the deploy lock" task took the lock
and every "Release the deploy lock" task; when the playbook ends (success, a failed host, a refused input, any
fatal error) with locks still held -- a failed host leaves every later play, so the playbook's last play cannot
release them -- it releases them with one ad-hoc ``ansible`` call over the same inventory and connection options,
and says so. A run killed outright (SIGKILL) gets no such end: its lock is stale, and the next deploy from this
controller sees that its PID is gone and takes it over (specops.runlock)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from specops import hostzip, paths, runlock

DOCUMENTATION = """
name: specops_deploy_lock
type: aggregate
short_description: name this run for the deploy lock, release the locks a failed run still holds
description:
  - Sets SPECOPS_RUN (this run's controller, PID and start time) for roles/deploy_lock, and at the end of the
    playbook releases, with one ad-hoc ansible call, the deploy locks a stopped run still holds.
requirements:
  - enabled in ansible.cfg (callbacks_enabled)
"""

TAKE = "Take the deploy lock"
RELEASE = "Release the deploy lock"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "specops_deploy_lock"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, str] = {}   # host -> lock path

    def v2_playbook_on_start(self, playbook) -> None:  # type: ignore[no-untyped-def]
        os.environ[runlock.ENV] = json.dumps(runlock.describe(os.getpid(), str(getattr(playbook, "_file_name", ""))))

    def v2_runner_on_ok(self, result) -> None:  # type: ignore[no-untyped-def]
        name = str(getattr(result._task, "name", "") or "")
        host = result._host.get_name()
        if TAKE in name:
            lines = [ln for ln in str(result._result.get("stdout", "")).splitlines() if ln.strip()]
            try:   # the answer is the last line (over SSH with a terminal, stderr's lines come before it)
                out = json.loads(lines[-1]) if lines else {}
            except ValueError:
                return
            if out.get("acquired") and out.get("path"):
                self.held[host] = out["path"]
        elif RELEASE in name:
            self.held.pop(host, None)

    def v2_playbook_on_stats(self, stats) -> None:  # type: ignore[no-untyped-def]
        if not self.held or os.environ.get("SPECOPS_DEPLOY_LOCK_RELEASING"):
            return
        run_id = json.loads(os.environ[runlock.ENV])["run_id"]
        for path in sorted(set(self.held.values())):
            hosts = sorted(h for h, p in self.held.items() if p == path)
            rc, tail = self._release(hosts, path, run_id)
            verdict = "released" if rc == 0 else f"NOT released (ansible exit {rc}: {tail})"
            self._display.display(f"deploy lock {path} {verdict} on {', '.join(hosts)}: this run stopped before "
                                  "its last play")
        self.held.clear()

    def _release(self, hosts: list[str], path: str, run_id: str) -> tuple[int, str]:
        args = context.CLIARGS
        # specops.host.deploy_lock, in the zip the roles run it from (roles/specops_package/tasks/host_scripts.yml)
        try:
            scripts = hostzip.build(paths.cache_dir() / "host-scripts")
        except OSError as exc:
            return 1, f"the host scripts zip: {exc}"
        exe = Path(sys.argv[0]).with_name("ansible")
        cmd = [str(exe) if exe.exists() else "ansible", ":".join(hosts), "-m", "ansible.builtin.script",
               "-a", f"{shlex.quote(str(scripts))} deploy_lock release --lock {shlex.quote(path)} "
                     f"--run-id {shlex.quote(run_id)}"]
        for inv in args.get("inventory") or ():
            cmd += ["-i", inv]
        for extra in args.get("extra_vars") or ():
            cmd += ["-e", extra]
        for flag, key in (("--private-key", "private_key_file"), ("-u", "remote_user"),
                          ("--become-user", "become_user"), ("--become-method", "become_method")):
            if args.get(key):
                cmd += [flag, str(args[key])]
        if args.get("become"):
            cmd.append("--become")
        env = {**os.environ, "SPECOPS_DEPLOY_LOCK_RELEASING": "1"}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, str(exc)
        return proc.returncode, " ".join((proc.stdout + proc.stderr).split())[-300:]
