"""Who this deploy run is, on the controller, and whether another run of the same controller is still alive.

A run is the ``ansible-playbook`` process: its controller host name, PID and the PID's start time (so a reused
PID is a different run). The deploy lock on each host (roles/deploy_lock) records it; a lock left by a run that
its own controller no longer runs is stale and taken over. A run on another controller cannot be checked from
here: its lock is waited for, taken over only when older than ``specops_deploy_lock_stale_after`` or broken by
hand."""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from typing import Any

ENV = "SPECOPS_RUN"


def pid_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); '' when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""


def describe(pid: int, playbook: str = "") -> dict[str, Any]:
    """The holder record of the run that is process ``pid`` on this machine."""
    start = pid_start(pid)
    host = socket.gethostname()
    return {"run_id": f"{host}:{pid}:{start}", "controller": host, "pid": pid, "pid_start": start,
            "user": getpass.getuser(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "playbook": playbook}


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2:].split()[1])


def main_process(pid: int | None = None) -> int:
    """The ansible-playbook process this one is, or was forked from: Ansible's workers are forks of it and keep
    its command line, so the topmost ancestor with this process's command line."""
    pid = pid or os.getpid()
    mine = _cmdline(pid)
    while True:
        parent = _ppid(pid)
        if parent <= 1 or _cmdline(parent) != mine:
            return pid
        pid = parent


def this_run() -> dict[str, Any]:
    """This run's record: as the specops_deploy_lock callback put it in the environment at the playbook's start,
    or (the callback not enabled: then a run that stops early keeps its locks until they are found stale) from
    the ansible-playbook process itself."""
    raw = os.environ.get(ENV, "")
    if raw:
        return json.loads(raw)
    return describe(main_process())


def dead_run(holder: Any, me: dict[str, Any] | None = None) -> str:
    """The holder's run id when it ran on this controller and its process is gone ('' = alive or unknown)."""
    if not isinstance(holder, dict) or not holder.get("run_id"):
        return ""
    me = me if me is not None else this_run()
    if holder["run_id"] == me.get("run_id") or holder.get("controller") != me.get("controller"):
        return ""
    try:
        pid = int(holder.get("pid"))
    except (TypeError, ValueError):
        return ""
    alive = pid_start(pid)
    return "" if alive and alive == str(holder.get("pid_start")) else str(holder["run_id"])
