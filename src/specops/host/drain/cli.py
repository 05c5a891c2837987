"""The drain's entry point: its options, and the restart (or stop) with the listener's hold where the drain can join
the server's listener, else with the hold after an idle look."""

from __future__ import annotations

import argparse
import collections
import os
import time
import urllib.parse

from specops.host.drain.afterlook import hold_then_stop
from specops.host.drain.connections import wait_port_free
from specops.host.drain.listener import Hold
from specops.host.drain.process import open_pid, terminate
from specops.host.drain.report import report
from specops.host.drain.restart import restart_held
from specops.host.drain.slots import look
from specops.host.drain.systemd import main_pid, start_unit, stop_unit
from specops.host.hostlib import auth_headers


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="drain.py")   # its usage line as when the drain was one file
    ap.add_argument("--unit", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds the requests in flight may take to finish before the signal goes anyway")
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--api-key-file")
    ap.add_argument("--grace", type=float, default=10,
                    help="seconds an idle server may take to exit after SIGTERM before a held request is assumed")
    ap.add_argument("--action", choices=["restart", "stop"], default="restart")
    # An upgrade: the old build's connections must be gone from the port before the new build binds it. A
    # llama-server of one build cannot bind over connections another build closed that linger on the port
    # (FIN-WAIT/TIME-WAIT, up to 60 s): "couldn't bind HTTP server socket" (4227c9be4 <-> 0c1e57098, both ways,
    # reproduced by hand; the same build binds over its own).
    ap.add_argument("--free-port", type=int, help="after the stop, wait until no socket uses this port")
    ap.add_argument("--free-port-timeout", type=float, default=75)
    ap.add_argument("--hold", choices=["auto", "filters", "freeze"], default="auto",
                    help="how new requests are kept from the server: auto, from the first moment by a listener of "
                         "the drain's own beside the server's (SO_REUSEPORT), else as filters or freeze do; "
                         "filters, after an idle look by socket filters on its own sockets where they can be "
                         "attached, else (or freeze) a look at its connections while it is stopped")
    ap.add_argument("--hold-limit", type=float, default=60,
                    help="seconds from the drain's start a new request may be held; then (and where it cannot be "
                         "handed to the new server at all) new requests are answered 503 with Retry-After")
    ap.add_argument("--retry-after", type=int, default=5, help="the Retry-After of those 503s, in seconds")
    ap.add_argument("--health-timeout", type=float, default=600,
                    help="seconds the new server may take to answer /health before the held requests are refused")
    ap.add_argument("--pause-after-look", type=float, default=0,
                    help="for tests: seconds between the idle look and the hold (filters, freeze), said on stderr (a "
                         "request begun then must still be answered whole)")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    headers = auth_headers(args.api_key_file)
    port = urllib.parse.urlsplit(args.url).port or 80
    pid = main_pid(args.unit)
    pidfd = open_pid(pid)   # None: none is running
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    out: dict = {"began": round(time.time(), 2)}
    if pidfd is not None:
        hold, why = Hold.begin(pid, port, args) if args.hold == "auto" else (None, f"--hold {args.hold}")
        if hold is not None:
            try:
                return restart_held(args, hold, pid, pidfd, port, headers, deadline, out)
            finally:
                os.close(pidfd)
        out["no_hold"] = why
    # the hold after an idle look (a llama-server without --reuse-port, another owner, --hold)
    mine: collections.deque = collections.deque(maxlen=4)   # the local ports of the drain's latest looks
    busy, port_ = look(args.url, headers)
    mine.append(port_)
    out.update(drained=busy in (0, None), slots="unreadable" if busy is None else "read")
    while busy and time.monotonic() < deadline:
        time.sleep(args.interval)
        busy, port_ = look(args.url, headers)
        mine.append(port_)
    out.update(drained=not busy, waited_s=round(time.monotonic() - t0, 2), busy_at_restart=busy or 0)
    t1 = time.monotonic()
    if pidfd is not None:
        if not busy:
            busy, done = hold_then_stop(args, pid, pidfd, port, headers, mine, deadline, out)
            if busy:
                out.update(drained=False, busy_at_restart=busy)
            else:
                out["stop_hung"] = not done
        else:
            # past the deadline a request is still running and llama-server will not exit on this signal, only on
            # a second (the deploy says those requests were cut): systemctl stop's, a second later, so that the
            # first has been taken (two SIGTERMs pending at once count as one)
            terminate(pidfd, min(args.grace, 1.0))
        os.close(pidfd)
    # held back without a count (SYN retries, unanswered requests); cut: past the deadline, or an answer open at
    # a signal the process did not exit on
    hung = out.get("stop_hung") and out.get("open_at_signal", 0)
    out["requests"] = {"held": None, "refused": None,
                       "cut": out["busy_at_restart"] if not out["drained"] else hung or 0}
    stop_unit(args.unit)
    out["stop_s"] = round(time.monotonic() - t1 - out.get("held_s", 0), 2)   # from the signal
    if args.free_port:
        out["port_wait_s"], out["port_states"] = wait_port_free(args.free_port, args.free_port_timeout)
    if args.action == "restart" and start_unit(args.unit, out):
        out["restart_s"] = round(time.monotonic() - t1, 2)
    return report(out)
