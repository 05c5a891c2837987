"""The hold from the start: the drain's own listener in the server's SO_REUSEPORT group takes every new connection,
then hands what it holds to the new server (tcp_migrate_req) or answers it 503 with Retry-After."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import select
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator

from specops.host.drain.bpf import steer
from specops.host.drain.connections import socket_fds
from specops.host.drain.process import exited, open_pid
from specops.host.drain.systemd import main_pid
from specops.host.hostlib import busy_slots, tcp_listeners

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
MIGRATE = "/proc/sys/net/ipv4/tcp_migrate_req"
SETTLE_S = 0.2               # a handshake begun before the group's program changed has completed by then


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
        pid = main_pid(unit)
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
