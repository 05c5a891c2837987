#!/usr/bin/env python3
"""Restart (or stop) a llama-server unit without cutting a request it is writing (standard library only).

llama-server stops generating the moment it is told to stop: a stream in flight is cut. So this waits until
none of the server's slots is processing (polling /slots every ``--interval`` seconds, at most ``--timeout``
seconds); past the deadline it restarts anyway and says how many requests it cut. Prints JSON: {"drained",
"waited_s", "busy_at_restart", "held", "open_at_signal", "stop_s", "restart_s", "slots"}; when the start fails,
"start_failed" (systemd's result and exit status, the unit's journal since the start) instead of "restart_s", the
same line on stderr, and exit status 1.

A look at /slots cannot be the last word: a request that llama-server has accepted but not yet handed to a slot
(it tokenizes in the HTTP thread, and /slots jumps the task queue) or one that arrives just after the look is not
in it, and SIGTERM cuts such a request after its first token (seen on the lab host: "1 cut after its first
token"). So once the slots are idle, new requests are kept from the server, and the signal goes only when it has
no client connection left (the reasons, from llama.cpp's source, are beside ``hold_then_stop``):

- ``"held": "socket filters"``: the drain takes llama-server's own sockets (pidfd_getfd, root, Linux 5.6+) and
  attaches a socket filter to them: the listening socket drops every new connection's packets (a client's
  connect waits in SYN retries, and is answered by the new process or refused once the old one is gone), each
  open connection drops any packet that carries data (a new request on a kept-alive connection goes unanswered;
  the answers in flight, whose client sends only ACKs, go on). Then it waits until no client connection is left
  (an answer in flight ends; llama-server closes an idle kept-alive connection after 5 s) and signals. The
  filters go with the process; a drain interrupted before its signal takes them off again.
- ``"held": "frozen look"`` where a filter cannot be attached (an older kernel, no ptrace rights, a container's
  seccomp filter; the reason follows): the drain stops the process (SIGSTOP), reads its connections from the
  kernel, and only when there are none sends SIGTERM while it is still stopped, then SIGCONT: the signal is
  taken as the process resumes, before a connection that reached the kernel meanwhile can become a task. With a
  connection open it lets the process go on, waits for idle slots again, and looks again. It cannot tell an idle
  kept-alive connection (a client's pool, the exporter's) from one that carries a request not yet in a slot: one
  that stays open 7 s with idle slots at every look is taken to be idle, and the signal goes at the next frozen
  instant after an idle look (a request sent on it in the milliseconds between that look and the freeze is the
  one case left: it holds the process open, and the JSON says so).

The waits are bounded by the drain's deadline (at least 7 s after the idle look: a kept-alive connection's 5 s);
past it the signal goes anyway and ``open_at_signal`` says how many client connections were still open (an
answer begun on one of them was cut when the process does not exit: ``stop_hung``). ``--hold`` picks one way
(default ``auto``: filters where they can be attached); ``--pause-after-look`` waits that long between the idle
look and the hold, so that a test can start a request in that gap on purpose.

The signal goes to the unit's main process through a pidfd, from this process (no systemctl, D-Bus or PID 1
between the decision and the signal), then ``systemctl stop`` once it has exited. When the process has not exited
``--grace`` seconds after the signal, ``systemctl stop`` sends the second SIGTERM (llama-server exits at once on a
second signal) and the JSON says ``"stop_hung": true``: a request held it open (with ``open_at_signal`` 0, one
that arrived as it stopped, never begun), and the outage is ``--grace`` seconds, not the unit's stop timeout.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

from hostlib import auth_headers, busy_slots, tcp_rows


def look(url: str, headers: dict) -> tuple[int | None, int | None]:
    """(slots processing, None where /slots cannot be read; the local port of this look's connection, which the
    counts of client connections leave out)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=5)
    mine = None
    try:
        conn.connect()
        mine = conn.sock.getsockname()[1]
        conn.request("GET", parts.path.rstrip("/") + "/slots", headers={**headers, "Connection": "close"})
        resp = conn.getresponse()
        slots = json.loads(resp.read()) if resp.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None, mine
    finally:
        conn.close()
    return busy_slots(slots), mine


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def sockets_on_port(port: int) -> list[str]:
    """States of the TCP sockets (IPv4 and IPv6) whose local port is ``port``, from /proc/net/tcp{,6}."""
    return [TCP_STATES.get(state, state) for lport, state, _, _ in tcp_rows() if lport == port]


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


def exited(pidfd: int, timeout: float) -> bool:
    """True when the process behind ``pidfd`` exits within ``timeout`` s (a pidfd reads ready once it has)."""
    return bool(select.select([pidfd], [], [], timeout)[0])


def terminate(pidfd: int, grace: float) -> bool:
    """SIGTERM through ``pidfd``; True when the process exited within ``grace`` seconds."""
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    except ProcessLookupError:
        return True
    return exited(pidfd, grace)


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

SYS_PIDFD_GETFD = 438        # pidfd_getfd(2): one number on every architecture but alpha, ia64 and mips
SO_ATTACH_FILTER, SO_DETACH_FILTER = 26, 27
# cpp-httplib closes a kept-alive connection idle this long (CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND, httplib.h:25-26,
# which llama-server keeps: server-http.cpp sets only the read and write timeouts)
KEEPALIVE_S = 5
LIVE = ("01", "08")          # ESTABLISHED, CLOSE_WAIT: a connection llama-server may still answer on
LISTEN = "0A"


# the listening socket: drop every packet (a new client's SYN, the last ACK of a handshake begun before)
DROP_ALL = ((0x06, 0, 0, 0),)          # ret #0
# a connection: drop a segment that carries data (a new request), keep the others (ACKs of an answer in flight,
# FIN). A TCP socket's filter sees the segment from its TCP header on: data = length - 4 * data offset.
DROP_DATA = (
    (0x30, 0, 0, 12),            # ldb [12]      data offset, high nibble
    (0x74, 0, 0, 2),             # rsh #2
    (0x54, 0, 0, 0x3C),          # and #0x3c     header length in bytes
    (0x07, 0, 0, 0),             # tax
    (0x80, 0, 0, 0),             # ld len
    (0x2D, 1, 0, 0),             # jgt x, drop
    (0x06, 0, 0, 0xFFFFFFFF),    # ret -1        keep
    (0x06, 0, 0, 0),             # drop: ret #0
)
_KEEP: list = []   # the instruction arrays the programs' bytes point into


def program(insns: tuple[tuple[int, int, int, int], ...]) -> bytes:
    """A classic BPF socket filter as setsockopt(SO_ATTACH_FILTER) takes it (struct sock_fprog)."""
    import ctypes  # here: a python3 without ctypes still drains, with the frozen look

    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]

    code = (Insn * len(insns))(*(Insn(*i) for i in insns))
    _KEEP.append(code)
    return bytes(Prog(len(insns), ctypes.cast(code, ctypes.POINTER(Insn))))


def client_connections(pid: int, port: int, ignore) -> list[int]:
    """Inodes (0: not accepted yet) of the connections to ``port`` a server may still answer on, less the drain's
    own looks (their local ports in ``ignore``)."""
    return [ino for lport, state, rport, ino in tcp_rows(pid)
            if lport == port and state in LIVE and rport not in ignore]


def socket_fds(pid: int) -> dict[int, int]:
    """inode -> descriptor of ``pid``'s sockets."""
    fds: dict[int, int] = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return fds
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            fds[int(target[8:-1])] = int(name)
    return fds


def take_fd(pidfd: int, fd: int) -> int:
    """A copy of descriptor ``fd`` of the process behind ``pidfd`` (pidfd_getfd(2): Linux 5.6+, ptrace rights)."""
    if platform.machine().startswith(("alpha", "ia64", "mips")):
        raise OSError(38, f"pidfd_getfd's number on {platform.machine()} is not known here")
    try:
        import ctypes
    except ImportError as exc:
        raise OSError(38, "no ctypes in this python3") from exc
    libc = ctypes.CDLL(None, use_errno=True)
    new = libc.syscall(ctypes.c_long(SYS_PIDFD_GETFD), ctypes.c_long(pidfd), ctypes.c_long(fd), ctypes.c_long(0))
    if new < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
    return new


class Doors:
    """Socket filters on a process's own sockets on ``port``: no new connection, no new request on an open one.
    They go with the process; ``reopen`` takes them off (a drain interrupted before its signal)."""

    def __init__(self, pid: int, pidfd: int, port: int) -> None:
        self.pid, self.pidfd, self.port = pid, pidfd, port
        self.filtered: set[int] = set()
        self.programs: tuple[bytes, bytes] = (b"", b"")

    def _set(self, inode: int, fd: int, program: bytes | None) -> bool:
        """Attach ``program`` (None: detach) to socket ``inode``, descriptor ``fd`` of the process; False when that
        descriptor no longer is that socket."""
        mine = take_fd(self.pidfd, fd)
        sock = None
        try:
            if os.fstat(mine).st_ino != inode:
                return False
            sock = socket.socket(fileno=mine)
            if program is None:
                sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
            else:
                sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, program)
            return True
        finally:   # this process's copy only
            if sock is not None:
                sock.close()
            else:
                os.close(mine)

    def close(self) -> str | None:
        """Filter the listening sockets, then the open connections. None when done, else why not (then nothing
        is left filtered)."""
        fds = socket_fds(self.pid)
        listeners = [ino for lport, state, _, ino in tcp_rows(self.pid)
                     if lport == self.port and state == LISTEN and ino in fds]
        if not listeners:
            return f"no listening socket of pid {self.pid} on port {self.port}"
        try:
            self.programs = program(DROP_ALL), program(DROP_DATA)
            for ino in listeners:
                if not self._set(ino, fds[ino], self.programs[0]):
                    raise OSError(0, f"the listening socket {ino} changed under the drain")
                self.filtered.add(ino)
        except (OSError, ImportError) as exc:   # ImportError: a python3 without ctypes
            self.reopen()
            return str(getattr(exc, "strerror", None) or exc)
        self.keep_closed(fds)
        return None

    def keep_closed(self, fds: dict[int, int] | None = None) -> None:
        """Filter the connections accepted since the last call (a handshake done before the listener's filter)."""
        fds = socket_fds(self.pid) if fds is None else fds
        for lport, state, _, ino in tcp_rows(self.pid):
            if lport == self.port and state in LIVE and ino in fds and ino not in self.filtered:
                with contextlib.suppress(OSError):   # closed meanwhile
                    if self._set(ino, fds[ino], self.programs[1]):
                        self.filtered.add(ino)

    def reopen(self) -> None:
        fds = socket_fds(self.pid)
        for ino in self.filtered:
            if ino in fds:
                with contextlib.suppress(OSError):
                    self._set(ino, fds[ino], None)
        self.filtered.clear()


def all_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (or gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("t", "T", "Z", "X"):
            return False
    return True


def freeze(pid: int, pidfd: int, timeout: float = 2.0) -> bool:
    """SIGSTOP, then wait until every thread has stopped; False when one had not within ``timeout`` s (a thread in
    uninterruptible sleep). The caller sends SIGCONT either way (``thaw``)."""
    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
    end = time.monotonic() + timeout
    while not all_stopped(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def thaw(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGCONT)


class Interrupted(Exception):
    pass


@contextlib.contextmanager
def interruptible():
    """SIGHUP, SIGINT and SIGTERM raise Interrupted in here, so that a hold is undone on the way out (a stopped
    process continued, filters taken off) instead of outliving the drain."""
    def stop(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)
    saved = {s: signal.signal(s, stop) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def hold_then_stop(args, pid: int, pidfd: int, port: int, headers: dict, mine: collections.deque,
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--timeout", type=float, default=300)
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
                    help="how new requests are kept from the server between the idle look and the signal: socket "
                         "filters on its own sockets where they can be attached (auto), else (or freeze) a look "
                         "at its connections while it is stopped")
    ap.add_argument("--pause-after-look", type=float, default=0,
                    help="for tests: seconds between the idle look and the hold, said on stderr (a request begun "
                         "then must still be answered whole)")
    args = ap.parse_args()
    headers = auth_headers(args.api_key_file)
    port = urllib.parse.urlsplit(args.url).port or 80
    main_pid = unit_props(args.unit, "MainPID").get("MainPID", "")
    pid = int(main_pid) if main_pid.isdigit() else 0
    pidfd = open_pid(pid)   # None: none is running
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    mine: collections.deque = collections.deque(maxlen=4)   # the local ports of the drain's latest looks
    busy, port_ = look(args.url, headers)
    mine.append(port_)
    out = {"drained": busy in (0, None), "slots": "unreadable" if busy is None else "read"}
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
    subprocess.run(["systemctl", "stop", args.unit], check=True)
    out["stop_s"] = round(time.monotonic() - t1 - out.get("held_s", 0), 2)   # from the signal
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
