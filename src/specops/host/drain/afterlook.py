"""The hold after an idle look (a llama-server without --reuse-port, another owner, ``--hold``): new requests kept
from the server by socket filters, else by the frozen look, and SIGTERM once it has no client connection."""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import time

from specops.host.drain.connections import KEEPALIVE_S, client_connections
from specops.host.drain.filters import Doors
from specops.host.drain.freeze import freeze, thaw
from specops.host.drain.process import exited, interruptible, terminate
from specops.host.drain.slots import look

# ---- the hold: no request reaches the server between the last look and the signal -----------------------------
# Why an idle look at /slots followed by SIGTERM cuts answers, at llama.cpp 0c1e57098 (tools/server/ and
# vendor/cpp-httplib/httplib.cpp, line numbers of that commit):
# - SIGTERM and SIGINT run shutdown_handler (server.cpp:28-37, 487-491): ctx_server.terminate() sets the task
#   queue's running = false (server-context.cpp:4150-4152, server-queue.cpp:132-136) and start_loop() leaves at its
#   next process_new_tasks() (server-queue.cpp:139-143, 298-303): no slot decodes another token. The HTTP server is
#   stopped only after that, in clean_up() (server.cpp:451-458, 542-545): the listener keeps accepting until then.
# - An answer in flight is not finished: its handler waits for results nobody sends any more
#   (server-queue.cpp:450-470; server_response::terminate() has no caller), and the process does not exit either
#   (ctx_http.join() waits for the handler threads, server-http.cpp:556-567) until the client leaves or a second
#   signal exits at once (server.cpp:29-33). No draining on SIGTERM to rely on.
# - Closing llama-server's listening socket (httplib's stop(), or shutdown() from outside) would not help: once it
#   is gone every chunked answer stops at its next chunk (httplib.cpp:8538-8547, 8705-8707, 4190-4206).
# - /slots misses requests: the HTTP thread tokenizes a prompt before it posts its task (server-context.cpp:4280,
#   4323), the /slots task jumps the queue (server-context.cpp:4718-4722) and is answered even mid-decode
#   (server-context.cpp:2356-2361). A request accepted before the look can take a slot right after it, and looking
#   twice moves the gap, it does not close it.
# So the drain keeps new requests from the server first and signals once the process has no client connection.


def hold_then_stop(args: argparse.Namespace, pid: int, pidfd: int, port: int, headers: dict, mine: collections.deque,
                   deadline: float, out: dict) -> tuple[int, bool]:
    """After an idle look: keep new requests from the server and SIGTERM it once it has no client connection.
    Returns (slots busy when it gave up waiting for idle slots again, whether the process exited within the grace);
    fills ``out``'s "held", "held_s", "open_at_signal" (and "no_filters": why not). Busy: the signal went as past
    the drain's deadline (no grace, see main).

    Bounds: slots are waited for until ``deadline`` (at least 7 s from now: a kept-alive connection's 5 s), and so
    are connections behind socket filters (none can carry a new request: each ends with its answer, or after 5 s
    idle). The frozen look cannot tell an idle kept-alive connection from one with a request not yet in a slot;
    one that stays open 7 s with the slots idle at every look is taken to be idle, and the signal goes at the next
    frozen instant after an idle look (if it held an answer after all, the process does not exit and the JSON says
    so: "stop_hung" with "open_at_signal")."""
    t0 = time.monotonic()
    if args.pause_after_look:
        print(f"drain: slots idle; the hold begins in {args.pause_after_look} s", file=sys.stderr, flush=True)
        time.sleep(args.pause_after_look)
    kept_alive = time.monotonic() + KEEPALIVE_S + 2
    bound = max(deadline, kept_alive)
    why = "--hold freeze"
    if args.hold != "freeze":
        doors = Doors(pid, pidfd, port)
        why = doors.close()
        if why is None:
            out["held"] = "socket filters"
            if args.pause_after_look:
                print("drain: held (socket filters)", file=sys.stderr, flush=True)
            try:
                with interruptible():
                    while True:
                        doors.keep_closed()
                        left = len(client_connections(pid, port, mine))
                        if not left or time.monotonic() >= bound:
                            break
                        time.sleep(args.interval)
            except BaseException:
                doors.reopen()
                raise
            out.update(open_at_signal=left, held_s=round(time.monotonic() - t0, 2))
            return 0, terminate(pidfd, args.grace)
    out.update(held="frozen look", no_filters=why)
    if args.pause_after_look:
        print("drain: held (frozen look)", file=sys.stderr, flush=True)
    rest = args.interval
    while True:
        signalled, left = False, None
        try:
            with interruptible():
                stopped = freeze(pid, pidfd)
                left = len(client_connections(pid, port, mine))
                now = time.monotonic()
                if (stopped and (not left or now >= kept_alive)) or now >= bound:
                    # pending while it is stopped: taken as it resumes, before a connection that reached the kernel
                    # meanwhile can become a task (that takes an accept, a read, a tokenization and a post)
                    signal.pidfd_send_signal(pidfd, signal.SIGTERM)
                    signalled = True
        except ProcessLookupError:
            out.update(open_at_signal=0, held_s=round(time.monotonic() - t0, 2))
            return 0, True   # gone already
        finally:
            thaw(pidfd)
        if signalled:
            out.update(open_at_signal=left, held_s=round(time.monotonic() - t0, 2))
            return 0, exited(pidfd, args.grace)
        # a client connection is open (or the process did not stop): let it go on, wait for idle slots, look again
        time.sleep(rest)
        rest = min(rest * 2, 1.0)
        busy, port_ = look(args.url, headers)
        mine.append(port_)
        while busy and time.monotonic() < bound:
            time.sleep(args.interval)
            busy, port_ = look(args.url, headers)
            mine.append(port_)
        if busy:
            out.update(open_at_signal=len(client_connections(pid, port, mine)), held_s=round(time.monotonic() - t0, 2))
            return busy, terminate(pidfd, min(args.grace, 1.0))
