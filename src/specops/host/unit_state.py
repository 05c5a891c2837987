"""Does the running service run the unit on disk? (standard library only; changes nothing but a
``systemctl daemon-reload`` under ``--reload-if-needed``)

An interrupted deploy can leave a new unit file on disk and the old process running (systemd then says
NeedDaemonReload=yes, or, after a reload, its ExecStart no longer matches the process). This compares what
runs -- the main process's command line from /proc -- with the command line systemd would start now, and
prints JSON: {"active", "need_daemon_reload", "main_pid", "invocation", "cmdline", "unit_argv", "matches"}.
``matches`` is null when nothing runs. With ``--sha256 P`` / ``--content P`` (each repeatable) it adds
"files": :func:`specops.host.files.look` of them (the unit file's checksum and the speed gate's record, in the same
run). systemd shows ExecStart's argv with specifiers expanded and its
arguments joined by single spaces, so the process's arguments are compared joined the same way.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

from specops.host.files import look
from specops.host.hostlib import systemctl_show

ARGV = re.compile(r"argv\[\]=(.*?) ; ignore_errors=")


def show(unit: str) -> dict:
    return systemctl_show(unit, "ActiveState", "NeedDaemonReload", "MainPID", "InvocationID", "ExecStart")


def cmdline(pid: int) -> list[str] | None:
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1]]


def state(props: dict, running: list[str] | None) -> dict:
    match = ARGV.search(props.get("ExecStart", ""))
    unit_argv = match.group(1) if match else None
    active = props.get("ActiveState") in ("active", "reloading", "activating")
    out = {"active": active, "need_daemon_reload": props.get("NeedDaemonReload") == "yes",
           "main_pid": int(props.get("MainPID") or 0), "invocation": props.get("InvocationID", ""),
           "cmdline": running, "unit_argv": unit_argv, "matches": None}
    if active and running is not None and unit_argv is not None:
        out["matches"] = " ".join(running) == unit_argv and not out["need_daemon_reload"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--reload-if-needed", action="store_true",
                    help="run systemctl daemon-reload first when systemd says the unit file changed on disk")
    ap.add_argument("--sha256", action="append", default=[], metavar="PATH", help="also this file's sha256")
    ap.add_argument("--content", action="append", default=[], metavar="PATH", help="also this file's content")
    args = ap.parse_args()
    props, reloaded = show(args.unit), False
    if args.reload_if_needed and props.get("NeedDaemonReload") == "yes":
        subprocess.run(["systemctl", "daemon-reload"], check=True)
        props, reloaded = show(args.unit), True
    files = {"files": look(args.sha256, args.content)} if args.sha256 or args.content else {}
    print(json.dumps({**state(props, cmdline(int(props.get("MainPID") or 0))), "reloaded": reloaded, **files}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
