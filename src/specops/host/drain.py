"""Restart (or stop) a llama-server unit without cutting a request it is writing (standard library only).

llama-server stops generating the moment it is told to stop: a stream in flight is cut. So the drain keeps every new
request from it from its first moment, waits (at most ``--timeout`` seconds) until the requests already in flight
have finished, signals it, restarts it and gives the new server the requests it held, once the new one answers
/health. Prints JSON: {"began" (epoch s), "held" (how: "listener", "socket filters", "frozen look"), "drained",
"waited_s", "in_flight", "busy_at_restart", "open_at_signal", "stop_hung", "stop_s", "restart_s", "released_s",
"released", "requests": {"held", "refused", "cut"}}; when the start fails, "start_failed" (systemd's result and exit
status, the unit's journal since the start) instead of "restart_s", the same line on stderr, and exit status 1.

- ``"held": "listener"`` (the default where it can be): llama-server listens with SO_REUSEPORT (``--reuse-port``,
  which the role's unit gives it), so the drain opens a listener of its own on the same address and port and has
  the kernel give it every new connection (a classic BPF program on the group, ``Hold``). A client connects and
  sends its request at once; the request waits in the drain's accept queue. The old server keeps only what it is
  already answering; a new request on one of its kept-alive connections gets no answer (socket filters where they
  can be attached, ``Doors``; elsewhere the old server answers it and the drain waits for it too, and a kept-alive
  connection open past 7 s with every slot idle at two looks is taken to be idle: the signal then goes while the
  process is stopped, as the frozen look's does). When it has no client connection left (or at the deadline:
  ``busy_at_restart`` answers still running are cut, and said), the drain signals it and starts the unit again;
  the new server joins the drain's group, and once it answers /health every new connection goes to it and the
  queue the drain holds moves to it whole when the drain closes its listener (net.ipv4.tcp_migrate_req, Linux 5.14+:
  set for that moment, as it was after). Its loading window is held too: no client sees its 503 "Loading model".
  Where the queue cannot move (an older kernel, /proc/sys read-only: a container), and for requests held longer than
  ``--hold-limit`` s, the drain answers them itself: 503 with ``Retry-After: --retry-after``. An upgrade (another
  build, ``--free-port``), ``--action stop``, a new process of another owner, a failed start or a new server not
  healthy in ``--health-timeout`` s: what it holds is answered so too. ``requests`` says how many it handed to the
  new server (held), answered 503 (refused) and cut.
- Where the drain cannot join (a llama-server without --reuse-port, ``no_hold`` says why) or ``--hold``
  says otherwise, the hold after an idle look below: it waits for a moment when no slot is processing (polling
  /slots every ``--interval`` s), then keeps new requests away, and signals once no client connection is left.
  Under steady traffic that moment may not come before the deadline (the issue-63 trial: 4 streams cut).

A look at /slots cannot be the last word: a request that llama-server has accepted but not yet handed to a slot
(it tokenizes in the HTTP thread, and /slots jumps the task queue) or one that arrives just after the look is not
in it, and SIGTERM cuts such a request after its first token (seen on the lab host: "1 cut after its first
token"). So the hold after an idle look keeps new requests from the server, and the signal goes only when it has
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
answer begun on one of them was cut when the process does not exit: ``stop_hung``). ``--hold filters`` or
``freeze`` picks one of these ways (``filters``: filters where they can be attached, else the frozen look);
``--pause-after-look`` waits that long between the idle look and the hold, so that a test can start a request in
that gap on purpose.

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
import pwd
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import NoReturn

from specops.host.hostlib import auth_headers, busy_slots, tcp_listeners, tcp_rows


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

    code = (Insn * len(insns))(*(Insn(c, jt, jf, k & 0xFFFFFFFF) for c, jt, jf, k in insns))
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

    def close(self, listeners: bool = True) -> str | None:
        """Filter the listening sockets (``listeners``), then the open connections. None when done, else why not
        (then nothing is left filtered)."""
        fds = socket_fds(self.pid)
        found = [ino for lport, state, _, ino in tcp_rows(self.pid)
                 if lport == self.port and state == LISTEN and ino in fds]
        if not found:
            return f"no listening socket of pid {self.pid} on port {self.port}"
        try:
            self.programs = program(DROP_ALL), program(DROP_DATA)
            os.close(take_fd(self.pidfd, fds[found[0]]))   # may this process take its sockets at all?
            for ino in found if listeners else ():
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
def interruptible() -> Iterator[None]:
    """SIGHUP, SIGINT and SIGTERM raise Interrupted in here, so that a hold is undone on the way out (a stopped
    process continued, filters taken off) instead of outliving the drain."""
    def stop(signum: int, _frame: object) -> NoReturn:
        raise Interrupted(signal.Signals(signum).name)
    saved = {s: signal.signal(s, stop) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


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


# ---- the hold from the start: a listener of the drain's own beside llama-server's -------------------------------
# With --reuse-port llama-server's listening socket has SO_REUSEPORT (tools/server/server-http.cpp:218-227 at
# 0c1e57098: SO_REUSEADDR always, SO_REUSEPORT with the flag; the role's unit gives it, llama_server_reuse_port), so a
# socket of the same owner may listen on its address and port: the kernel then picks one socket of
# that group for each new connection, by its index in the group where a classic BPF program is attached to it
# (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5+). The drain's listener joins and takes every new connection from its first
# moment (their handshakes complete, their requests wait unread in its accept queue): the old server keeps only what
# it is already answering. Once the new server has joined the group and answers /health, every new connection goes
# to it and the drain closes its listener: with net.ipv4.tcp_migrate_req (Linux 5.14+) a closing listener's queue
# moves to another listener of its group, so the held requests are the new server's, in one move. Where that cannot
# be (an older kernel, a read-only /proc/sys: a container), or past --hold-limit, the drain answers new connections
# itself: 503 with Retry-After. The drain's own looks (/slots, /health) go from a source port the program sends to
# the server's index.

SO_ATTACH_REUSEPORT_CBPF = 51
SKF_NET_OFF = -0x100000      # classic BPF: a load relative to the IP header
MIGRATE = "/proc/sys/net/ipv4/tcp_migrate_req"
SETTLE_S = 0.2               # a handshake begun before the group's program changed has completed by then


def steer(mine: int, other: int, probe: int = 0) -> bytes:
    """The group's program: every new connection to index ``mine``, one from source port ``probe`` to ``other``
    (IPv4 without options or IPv6, as the drain's own connections are)."""
    return program((
        (0x30, 0, 0, SKF_NET_OFF),           # ldb [ip]        version, header length
        (0x15, 0, 2, 0x45),                  # jeq #0x45       IPv4, 20 bytes
        (0x28, 0, 0, SKF_NET_OFF + 20),      # ldh [ip + 20]   its TCP source port
        (0x05, 0, 0, 3),                     # ja port
        (0x74, 0, 0, 4),                     # rsh #4
        (0x15, 0, 3, 6),                     # jeq #6          IPv6
        (0x28, 0, 0, SKF_NET_OFF + 40),      # ldh [ip + 40]   its TCP source port
        (0x15, 0, 1, probe),                 # port: jeq #probe
        (0x06, 0, 0, other),                 # ret #other
        (0x06, 0, 0, mine),                  # ret #mine
    ))


def can_migrate() -> bool:
    """A closing listener's queue can move to another of its group (tcp_migrate_req is on, or this may turn it on)."""
    try:
        with open(MIGRATE) as fh:
            return fh.read().strip() == "1" or os.access(MIGRATE, os.W_OK)
    except OSError:
        return False


@contextlib.contextmanager
def migrating() -> Iterator[bool]:
    """tcp_migrate_req on (yields whether it is), as it was again afterwards."""
    try:
        with open(MIGRATE) as fh:
            before = fh.read().strip()
        if before != "1":
            with open(MIGRATE, "w") as fh:
                fh.write("1")
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        if before != "1":
            with contextlib.suppress(OSError), open(MIGRATE, "w") as fh:
                fh.write(before)


def owned_socket(uid: int, family: int) -> socket.socket:
    """A TCP socket owned by ``uid``: only a socket of the same owner joins a SO_REUSEPORT group."""
    euid = os.geteuid()
    if uid == euid:
        return socket.socket(family, socket.SOCK_STREAM)
    os.seteuid(uid)
    try:
        return socket.socket(family, socket.SOCK_STREAM)
    finally:
        os.seteuid(euid)


def uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[2]) for line in fh if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def next_owner(unit: str) -> int | None:
    """The uid the unit's next process runs as; None where systemd picks it at the start (DynamicUser=: the uid
    hashed from the unit's name, the old process's again)."""
    props = unit_props(unit, "User", "DynamicUser")
    user = props.get("User", "")
    if props.get("DynamicUser") == "yes":
        return None
    if user.isdigit() or not user:
        return int(user or 0)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def refuse(conn: socket.socket, retry_after: int) -> None:
    """Answer one held connection 503 with Retry-After, then wait for its client to close first (no TIME_WAIT of
    the drain's left on the server's port)."""
    body = json.dumps({"error": {"code": 503, "type": "unavailable_error",
                                 "message": f"restarting: retry after {retry_after} s"}}).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\nRetry-After: {retry_after}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with conn, contextlib.suppress(OSError):
        conn.settimeout(2)
        conn.recv(65536)             # its request (what has come of it)
        conn.sendall(head + body)
        while conn.recv(65536):
            pass


class Hold:
    """The drain's listener in the old server's SO_REUSEPORT group (above). ``held``: connections handed to the new
    server; ``refused``: answered here 503 with Retry-After."""

    def __init__(self, sock: socket.socket, address: str, port: int, uid: int, mine: int,
                 args: argparse.Namespace) -> None:
        self.sock, self.address, self.port, self.uid = sock, address, port, uid
        parts = urllib.parse.urlsplit(args.url)   # where the drain's own looks go
        self.host, self.target = parts.netloc, socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)[0]
        self.inode = os.fstat(sock.fileno()).st_ino
        self.mine, self.other = mine, 0               # indexes in the group: the old server's listener came first
        self.retry_after, self.limit = args.retry_after, args.hold_limit
        self.hold_until = time.monotonic() + args.hold_limit
        # why new connections are answered here (503 with Retry-After) instead of held; "" while they are held
        self.why = ("--hold-limit 0" if args.hold_limit <= 0 else
                    "" if can_migrate() else f"{MIGRATE} is 0 and cannot be set here")
        self.held = self.refused = 0
        self.outcome = ""
        self.answering: list[threading.Thread] = []
        sock.setblocking(False)

    @classmethod
    def begin(cls, pid: int, port: int, args: argparse.Namespace) -> tuple[Hold | None, str]:
        """Join the group of ``pid``'s listener on ``port`` and take its new connections; (None, why) where not."""
        fds = socket_fds(pid)
        own = [x for x in tcp_listeners(port, pid) if x.inode in fds]
        if len(own) != 1:
            return None, f"{len(own)} listening sockets of pid {pid} on port {port}"
        old = own[0]
        sock = None
        try:
            sock = owned_socket(old.uid, socket.AF_INET6 if old.v6 else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((old.address, port))
            mine = len([x for x in tcp_listeners(port) if (x.address, x.v6) == (old.address, old.v6)])
            if not mine:
                raise OSError(0, "the server listens in another network namespace")
            hold = cls(sock, old.address, port, old.uid, mine, args)
            if not hold.proven():
                raise OSError(0, "a connection of its own did not reach it")
            hold.attach(steer(hold.mine, hold.other))
        except OSError as exc:
            if sock is not None:
                sock.close()
            return None, f"its own listener beside it: {exc.strerror or exc}"
        return hold, ""

    @property
    def open(self) -> bool:
        return self.sock.fileno() >= 0

    def attach(self, code: bytes) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, code)

    def client(self) -> socket.socket:
        conn = socket.socket(self.target[0], socket.SOCK_STREAM)
        conn.bind(("::" if self.target[0] == socket.AF_INET6 else "0.0.0.0", 0))
        return conn

    def proven(self) -> bool:
        """Listen, and prove its index: a connection from a port of its own reaches it, every other still the
        server (the program is attached as it joins the group: until then the kernel picks by a hash)."""
        conn = self.client()
        probe = conn.getsockname()[1]
        try:
            self.sock.listen(socket.SOMAXCONN)
            self.attach(steer(self.other, self.mine, probe))
            conn.settimeout(2)
            conn.connect(self.target[4])
            end = time.monotonic() + 1
            while select.select([self.sock], [], [], max(0.0, end - time.monotonic()))[0]:
                got, peer = self.sock.accept()
                if peer[1] == probe:
                    got.close()
                    return True
                self.answer(got)   # a client's, in the moment before the program: answered 503 with Retry-After
            return False
        finally:
            conn.close()

    def ask(self, path: str, headers: dict) -> tuple[int | None, bytes]:
        """GET ``path`` of the server in the group (not this listener): the drain's looks."""
        conn = self.client()
        try:
            self.attach(steer(self.mine, self.other, conn.getsockname()[1]))
            conn.settimeout(5)
            conn.connect(self.target[4])
            lines = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Connection": "close"}.items())
            conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n{lines}\r\n".encode())
            resp = http.client.HTTPResponse(conn)
            resp.begin()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            return None, b""
        finally:
            conn.close()
            self.attach(steer(self.mine, self.other))

    def look(self, headers: dict) -> int | None:
        """Slots processing in the server's /slots (None: unreadable)."""
        status, body = self.ask("/slots", headers)
        try:
            return busy_slots(json.loads(body)) if status == 200 else None
        except ValueError:
            return None

    def others(self) -> bool:
        """Another listener is in the group (on its address and port: it could not be there otherwise)."""
        return any(x.address == self.address and x.inode != self.inode for x in tcp_listeners(self.port))

    def queued(self) -> int:
        """Connections in its accept queue (tcp_info's tcpi_unacked, for a listening socket)."""
        return struct.unpack_from("I", self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), 24)[0]

    def tick(self) -> None:
        """Past the hold limit (or without migration) answer what came: 503 with Retry-After."""
        if not self.why and time.monotonic() >= self.hold_until:
            self.why = f"held {self.limit:g} s (--hold-limit)"
        if not self.why:
            return
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.answer(conn)

    def answer(self, conn: socket.socket) -> None:
        self.refused += 1
        answer = threading.Thread(target=refuse, args=(conn, self.retry_after), daemon=True)
        answer.start()
        self.answering.append(answer)

    def release(self, why: str = "") -> None:
        """Every new connection to the other listener of the group, what this one holds handed to it, and closed;
        with ``why`` (or where it cannot be handed over) what it holds is answered 503 with Retry-After."""
        if not self.open:
            return
        self.attach(steer(self.other, self.other))
        time.sleep(SETTLE_S)
        self.why = self.why or why or ("" if self.others() else "no other listener on the port")
        if not self.why:
            with migrating() as ok:
                if ok:
                    self.held += self.queued()
                    self.sock.close()
                    self.outcome = "handed to the new server"
                    return
            self.why = f"{MIGRATE} could not be set"
        self.tick()
        self.sock.close()
        self.outcome = f"answered 503 with Retry-After: {self.why}"

    def await_new(self, unit: str, headers: dict, timeout: float, interval: float) -> None:
        """After the start: release to the new server once it has joined the group and answers /health."""
        main_pid = unit_props(unit, "MainPID").get("MainPID", "")
        pid = int(main_pid) if main_pid.isdigit() else 0
        pidfd = open_pid(pid)
        if pidfd is None:
            return self.release("no new process")
        try:
            uid = uid_of(pid)
            if uid not in (None, self.uid):
                return self.release(f"the new process runs as uid {uid}, not {self.uid}: it cannot join")
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if exited(pidfd, 0):
                    return self.release("the new process exited")
                self.tick()
                if self.others() and self.ask("/health", headers)[0] == 200:
                    return self.release()
                time.sleep(interval)
            return self.release(f"the new server did not answer /health in {timeout:g} s")
        finally:
            os.close(pidfd)

    def finish(self) -> dict:
        for answer in self.answering:
            answer.join(5)
        return {"held": self.held, "refused": self.refused}


def old_connections(pid: int, port: int) -> list[int]:
    """Inodes of the client connections the old server has (0: one in its accept queue): each an answer in flight
    or an idle kept-alive connection; none can come new (the drain's listener takes every new one)."""
    fds = socket_fds(pid)
    live = [ino for lport, state, _, ino in tcp_rows(pid) if lport == port and state in LIVE and ino in fds]
    return live + [0] * sum(x.queued for x in tcp_listeners(port, pid) if x.inode in fds)


def signal_frozen(pid: int, pidfd: int) -> bool:
    """SIGTERM while the process is stopped (taken as it resumes, before a request that reached the kernel meanwhile
    can become a task: see hold_then_stop); False where it did not stop."""
    try:
        if not freeze(pid, pidfd):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        return True
    except ProcessLookupError:
        return True
    finally:
        thaw(pidfd)


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
            subprocess.run(["systemctl", "stop", args.unit], check=True)
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


def start_unit(unit: str, out: dict) -> bool:
    started = time.time() - 1
    if subprocess.run(["systemctl", "start", unit], check=False).returncode != 0:
        out["start_failed"] = why_start_failed(unit, started)
        return False
    return True


def report(out: dict) -> int:
    print(json.dumps(out))
    if "start_failed" in out:
        print(out["start_failed"], file=sys.stderr)  # the deploy's one-line failure quotes this line
        return 1
    return 0


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
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
    main_pid = unit_props(args.unit, "MainPID").get("MainPID", "")
    pid = int(main_pid) if main_pid.isdigit() else 0
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
    subprocess.run(["systemctl", "stop", args.unit], check=True)
    out["stop_s"] = round(time.monotonic() - t1 - out.get("held_s", 0), 2)   # from the signal
    if args.free_port:
        out["port_wait_s"], out["port_states"] = wait_port_free(args.free_port, args.free_port_timeout)
    if args.action == "restart" and start_unit(args.unit, out):
        out["restart_s"] = round(time.monotonic() - t1, 2)
    return report(out)


if __name__ == "__main__":
    sys.exit(main())
