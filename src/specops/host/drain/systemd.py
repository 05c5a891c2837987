"""The unit's side of the drain, through systemd: its main PID, the owner of its next process, its stop and start,
and why a start failed (systemd's result and the unit's journal)."""

from __future__ import annotations

import pwd
import subprocess
import time

from specops.host.hostlib import systemctl_show


def main_pid(unit: str) -> int:
    """The unit's main process (0: none runs)."""
    pid = systemctl_show(unit, "MainPID").get("MainPID", "")
    return int(pid) if pid.isdigit() else 0


def why_start_failed(unit: str, since: float) -> str:
    """One line: how systemd ended the start of ``unit`` (result, exit status) and its journal since ``since``."""
    props = systemctl_show(unit, "Id", "Result", "ExecMainCode", "ExecMainStatus")
    name = props.get("Id") or unit   # the full name ("x.service") the journal fields carry
    # the failed process's own line (e.g. the missing executable) can reach the journal after systemd's lines
    # about it (seen once under load): --sync stores everything logged so far before it is read
    subprocess.run(["journalctl", "--sync"], capture_output=True, text=True, check=False)
    # matched by the UNIT= field systemd writes into its lines and its forked child's (e.g. "Failed to locate
    # executable"), not -u alone: -u takes a non-PID-1 line only with _SYSTEMD_UNIT, which journald derives from
    # the sender's cgroup and leaves out when the child has exited before it reads the line (CI, under load)
    journal = subprocess.run(["journalctl", "--since", f"@{int(since)}", "-n", "6", "-o", "cat", "--no-pager",
                              f"_SYSTEMD_UNIT={name}", "+", f"UNIT={name}"],
                             capture_output=True, text=True, check=False).stdout.split("\n")
    lines = " | ".join(line.strip() for line in journal if line.strip())
    return (f"systemctl start {unit} failed: result {props.get('Result', '?')}, main process status "
            f"{props.get('ExecMainStatus', '?')} (code {props.get('ExecMainCode', '?')}); journal: {lines or 'empty'}")


def next_owner(unit: str) -> int | None:
    """The uid the unit's next process runs as; None where systemd picks it at the start (DynamicUser=: the uid
    hashed from the unit's name, the old process's again)."""
    props = systemctl_show(unit, "User", "DynamicUser")
    user = props.get("User", "")
    if props.get("DynamicUser") == "yes":
        return None
    if user.isdigit() or not user:
        return int(user or 0)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def start_unit(unit: str, out: dict) -> bool:
    started = time.time() - 1
    if subprocess.run(["systemctl", "start", unit], check=False).returncode != 0:
        out["start_failed"] = why_start_failed(unit, started)
        return False
    return True


def stop_unit(unit: str) -> None:
    subprocess.run(["systemctl", "stop", unit], check=True)
