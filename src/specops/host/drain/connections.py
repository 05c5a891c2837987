"""The old server's sockets, from the kernel: its connections on the port (/proc/PID/net/tcp{,6}) and its
descriptors (/proc/PID/fd), and the wait for a port to be free (an upgrade)."""

from __future__ import annotations

import os
import time

from specops.host.hostlib import tcp_listeners, tcp_rows

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


# cpp-httplib closes a kept-alive connection idle this long (CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND, httplib.h:25-26,
# which llama-server keeps: server-http.cpp sets only the read and write timeouts)
KEEPALIVE_S = 5
LIVE = ("01", "08")          # ESTABLISHED, CLOSE_WAIT: a connection llama-server may still answer on
LISTEN = "0A"


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


def old_connections(pid: int, port: int) -> list[int]:
    """Inodes of the client connections the old server has (0: one in its accept queue): each an answer in flight
    or an idle kept-alive connection; none can come new (the drain's listener takes every new one)."""
    fds = socket_fds(pid)
    live = [ino for lport, state, _, ino in tcp_rows(pid) if lport == port and state in LIVE and ino in fds]
    return live + [0] * sum(x.queued for x in tcp_listeners(port, pid) if x.inode in fds)
