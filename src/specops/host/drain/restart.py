"""The restart with the listener's hold: the requests in flight waited for, the signal, the stop and the start, and
the held requests handed to the new server once it answers /health."""

from __future__ import annotations

import argparse
import time

from specops.host.drain.bpf import steer
from specops.host.drain.connections import KEEPALIVE_S, old_connections, wait_port_free
from specops.host.drain.filters import Doors
from specops.host.drain.freeze import signal_frozen
from specops.host.drain.listener import Hold
from specops.host.drain.process import exited, interruptible, terminate
from specops.host.drain.report import report
from specops.host.drain.systemd import next_owner, start_unit, stop_unit


def restart_held(args: argparse.Namespace, hold: Hold, pid: int, pidfd: int, port: int, headers: dict, deadline: float,
                 out: dict) -> int:
    """New requests held from the first moment; the requests in flight waited for (until ``deadline``); the
    signal, the stop and the start; the held requests handed to the new server once it answers /health."""
    t0 = time.monotonic()
    cut = 0
    out["held"] = "listener"
    doors: Doors | None = Doors(pid, pidfd, port)
    why = doors.close(listeners=False)   # a new request on a kept-alive connection goes unanswered
    if why is not None:
        out["no_filters"], doors = why, None
    try:
        with interruptible():
            first: dict[int, float] = {}   # when each connection was first seen open
            looked, frozen = 0.0, False
            idle: tuple[int, ...] = ()     # the connections open at the last look, every slot idle
            out["in_flight"] = len(old_connections(pid, port))
            while True:
                conns, now = old_connections(pid, port), time.monotonic()
                if not conns or now >= deadline:
                    break
                for ino in conns:
                    first.setdefault(ino, now)
                # Without filters a kept-alive connection stays open while its client keeps using it (the
                # exporter's pool): open past the server's keep-alive timeout with every slot idle at two looks
                # 0.5 s apart (an answer that has just left its slot closes its connection within that), it is
                # taken to be idle, and the signal goes at a frozen instant, as the frozen look's does.
                if (doors is None and now - looked >= 0.5
                        and all(ino and now - first[ino] >= KEEPALIVE_S + 2 for ino in conns)):
                    looked, same = now, idle == tuple(sorted(conns))
                    idle = tuple(sorted(conns)) if hold.look(headers) == 0 else ()
                    if idle and same and signal_frozen(pid, pidfd):
                        frozen = True
                        break
                hold.tick()
                if doors is not None:
                    doors.keep_closed()
                time.sleep(args.interval)
            left = len(conns)
            # past the deadline: how many of them are answers (the others idle kept-alive connections)
            busy = 0 if frozen or not left else hold.look(headers) or 0
            out.update(waited_s=round(time.monotonic() - t0, 2), open_at_signal=left, busy_at_restart=busy)
            t1 = time.monotonic()
            grace = min(args.grace, 1.0) if busy else args.grace
            done = exited(pidfd, grace) if frozen else terminate(pidfd, grace)
            cut = busy or (0 if done else left)
            out.update(drained=not cut, stop_hung=not done and not busy)
            stop_unit(args.unit)
            out["stop_s"] = round(time.monotonic() - t1, 2)
            hold.mine, hold.other = 0, 1   # the old server's listener has left the group
            hold.attach(steer(hold.mine, hold.other))
            owner = next_owner(args.unit)
            if args.action == "stop":
                hold.release("the service stops")
            elif args.free_port:
                hold.release("another build: it may not join the drain's listener")
            elif owner not in (None, hold.uid):
                hold.release(f"the new unit runs as uid {owner}, not {hold.uid}: it cannot join")
            if args.free_port:
                out["port_wait_s"], out["port_states"] = wait_port_free(args.free_port, args.free_port_timeout)
            if args.action == "restart":
                if start_unit(args.unit, out):
                    out["restart_s"] = round(time.monotonic() - t1, 2)
                    if hold.open:
                        hold.await_new(args.unit, headers, args.health_timeout, max(args.interval, 0.2))
                else:
                    hold.release("the start failed")
    except BaseException:
        if doors is not None:
            doors.reopen()
        hold.release()   # to the old server where it still runs, else answered 503
        raise
    finally:
        out.update(released_s=round(time.monotonic() - t0, 2), released=hold.outcome,
                   requests={**hold.finish(), "cut": cut})
    return report(out)
