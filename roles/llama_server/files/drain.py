#!/usr/bin/env python3
"""Restart (or stop) a llama-server unit without cutting a request it is writing (standard library only).

llama-server stops generating the moment it is told to stop: a stream in flight is cut. So this waits until
none of the server's slots is processing (polling /slots every ``--interval`` seconds, at most ``--timeout``
seconds) and restarts the unit at that moment; past the deadline it restarts anyway and says how many
requests it cut. Prints JSON: {"drained", "waited_s", "busy_at_restart", "stop_s", "restart_s", "slots"}; when
the start fails, "start_failed" (systemd's result and exit status, the unit's journal since the start) instead of
"restart_s", the same line on stderr, and exit status 1.
The stop is one signal: the look that finds every slot idle is followed at once by SIGTERM to the unit's main
process (through a pidfd, from this process: no systemctl, D-Bus or PID 1 between them, which on a loaded host took
longer than a busy client's pause between requests), then ``systemctl stop`` once it has exited. A request that
arrives after that signal finds the port closing and is answered again once the new process listens (the
model-load window, measured by tests). One that begins in the instant between the look and the signal is cut, and
llama-server then holds it open instead of exiting; so when the process has not exited ``--grace`` seconds after
the signal, ``systemctl stop`` sends the second SIGTERM (llama-server exits at once on a second signal) and the
JSON says ``"stop_hung": true`` -- the deploy reports the cut instead of "idle", and the outage is ``--grace``
seconds, not the unit's stop timeout.
"""

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request


def busy_slots(url: str, headers: dict) -> int | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/slots", headers=headers), timeout=5) as r:
            slots = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(slots, list):
        return None
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))


def read_key(path: str) -> str:
    """The first key as llama-server reads --api-key-file (LF-split, nothing stripped, blank and # lines skipped;
    the deploy's first play refuses a file where that differs from what a client would send)."""
    with open(path, "rb") as fh:
        lines = fh.read().decode("utf-8", "replace").split("\n")
    return next((line for line in lines if line and not line.startswith("#")), "")


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def sockets_on_port(port: int) -> list[str]:
    """States of the TCP sockets (IPv4 and IPv6) whose local port is ``port``, from /proc/net/tcp{,6}."""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and int(fields[1].rsplit(":", 1)[1], 16) == port:
                states.append(TCP_STATES.get(fields[3], fields[3]))
    return states


def wait_port_free(port: int, timeout: float, interval: float = 0.2) -> tuple[float, list[str]]:
    """Wait until no socket uses ``port`` (at most ``timeout`` s); (seconds waited, the states seen first)."""
    t0 = time.monotonic()
    first = states = sockets_on_port(port)
    while states and time.monotonic() - t0 < timeout:
        time.sleep(interval)
        states = sockets_on_port(port)
    return round(time.monotonic() - t0, 2), sorted(set(first))


def unit_props(unit: str, *names: str) -> dict[str, str]:
    """``systemctl show`` of these properties of ``unit`` ({} where systemctl says nothing)."""
    show = subprocess.run(["systemctl", "show", "-p", ",".join(names), unit], capture_output=True, text=True,
                          check=False).stdout
    return dict(line.split("=", 1) for line in show.splitlines() if "=" in line)


def why_start_failed(unit: str, since: float) -> str:
    """One line: how systemd ended the start of ``unit`` (result, exit status) and its journal since ``since``."""
    props = unit_props(unit, "Id", "Result", "ExecMainCode", "ExecMainStatus")
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


def open_pid(pid: int) -> int | None:
    """A pidfd for ``pid`` (signals and exit waits that cannot reach a reused pid), None where there is none."""
    try:
        return os.pidfd_open(pid) if pid > 0 else None
    except OSError:   # gone already, or a kernel without pidfds (before 5.3)
        return None


def terminate(pidfd: int, grace: float) -> bool:
    """SIGTERM through ``pidfd``; True when the process exited within ``grace`` seconds."""
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    except ProcessLookupError:
        return True
    return bool(select.select([pidfd], [], [], grace)[0])   # a pidfd reads ready when its process has exited


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--api-key-file")
    ap.add_argument("--grace", type=float, default=10,
                    help="seconds an idle server may take to exit after SIGTERM before a cut request is assumed")
    ap.add_argument("--action", choices=["restart", "stop"], default="restart")
    # An upgrade: the old build's connections must be gone from the port before the new build binds it. A
    # llama-server of one build cannot bind over connections another build closed that linger on the port
    # (FIN-WAIT/TIME-WAIT, up to 60 s): "couldn't bind HTTP server socket" (4227c9be4 <-> 0c1e57098, both ways,
    # reproduced by hand; the same build binds over its own).
    ap.add_argument("--free-port", type=int, help="after the stop, wait until no socket uses this port")
    ap.add_argument("--free-port-timeout", type=float, default=75)
    args = ap.parse_args()
    headers = {"Authorization": f"Bearer {read_key(args.api_key_file)}"} if args.api_key_file else {}
    main_pid = unit_props(args.unit, "MainPID").get("MainPID", "")
    pidfd = open_pid(int(main_pid) if main_pid.isdigit() else 0)   # 0: none is running
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    busy = busy_slots(args.url, headers)
    out = {"drained": busy in (0, None), "slots": "unreadable" if busy is None else "read"}
    while busy and time.monotonic() < deadline:
        time.sleep(args.interval)
        busy = busy_slots(args.url, headers)
    out.update(drained=not busy, waited_s=round(time.monotonic() - t0, 2), busy_at_restart=busy or 0)
    t1 = time.monotonic()
    if pidfd is not None:
        # past the deadline a request is still running and llama-server will not exit on this signal, only on a
        # second (the deploy says those requests were cut): systemctl stop's, a second later, so that the first
        # has been taken (two SIGTERMs pending at once count as one)
        exited = terminate(pidfd, min(args.grace, 1.0) if busy else args.grace)
        os.close(pidfd)
        if not busy:
            out["stop_hung"] = not exited
    subprocess.run(["systemctl", "stop", args.unit], check=True)
    out["stop_s"] = round(time.monotonic() - t1, 2)
    if args.free_port:
        out["port_wait_s"], out["port_states"] = wait_port_free(args.free_port, args.free_port_timeout)
    if args.action == "restart":
        started = time.time() - 1
        if subprocess.run(["systemctl", "start", args.unit], check=False).returncode != 0:
            out["start_failed"] = why_start_failed(args.unit, started)
            print(json.dumps(out))
            print(out["start_failed"], file=sys.stderr)  # the deploy's one-line failure quotes this line
            return 1
        out["restart_s"] = round(time.monotonic() - t1, 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
