"""What the host scripts share (standard library only): the API key header they send, how many of llama-server's
slots are busy in a /slots answer, the kernel's TCP tables (connections and listening sockets), and a unit's
properties as ``systemctl show`` gives them.

The key comes from specops.keyfile (llama-server's own rule for --api-key-file, and the one reader of that file
kind); both go to the host in the zip the deploy ships (specops.hostzip)."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import NamedTuple

from specops.keyfile import first_key


def auth_headers(key_file: str | None) -> dict[str, str]:
    """The Authorization header with the first key of ``key_file`` as llama-server reads the file (specops.keyfile;
    the deploy's first play refuses a file whose first key no client can send); {} without a file."""
    return {"Authorization": f"Bearer {first_key(key_file)}"} if key_file else {}


def busy_slots(slots: object) -> int | None:
    """How many slots of a /slots answer are processing a request; None when the answer is not a list."""
    if not isinstance(slots, list):
        return None
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))


def _tcp_table(pid: int | None) -> list[tuple[bool, list[str]]]:
    """(IPv6?, the fields of one row) of /proc/[PID/]net/tcp{,6}: the TCP sockets in ``pid``'s network namespace
    (None: this process's)."""
    base = f"/proc/{pid}/net" if pid is not None else "/proc/net"
    rows = []
    for v6, table in ((False, f"{base}/tcp"), (True, f"{base}/tcp6")):
        try:
            with open(table) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        rows += [(v6, f) for f in (line.split() for line in lines) if len(f) > 9]
    return rows


def _port(field: str) -> int:
    return int(field.rsplit(":", 1)[1], 16)


def tcp_rows(pid: int | None = None) -> list[tuple[int, str, int, int]]:
    """(local port, state, remote port, inode) of the TCP sockets in ``pid``'s network namespace (None: this
    process's), from the kernel's tables /proc/[PID/]net/tcp{,6}."""
    return [(_port(f[1]), f[3], _port(f[2]), int(f[9])) for _, f in _tcp_table(pid)]


class Listener(NamedTuple):
    address: str   # as bind() takes it: "127.0.0.1", "::"
    v6: bool
    uid: int       # its owner: a socket joins another's SO_REUSEPORT group only with the same
    inode: int
    queued: int    # connections in its accept queue


def tcp_listeners(port: int, pid: int | None = None) -> list[Listener]:
    """The listening TCP sockets on ``port`` in ``pid``'s network namespace (None: this process's)."""
    found = []
    for v6, f in _tcp_table(pid):
        if f[3] != "0A" or _port(f[1]) != port:
            continue
        raw = bytes.fromhex(f[1].rsplit(":", 1)[0])   # 32-bit words in the host's byte order
        if sys.byteorder == "little":
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
        address = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, raw)
        found.append(Listener(address, v6, int(f[7]), int(f[9]), int(f[4].split(":")[1], 16)))
    return found


def systemctl_show(unit: str, *names: str) -> dict[str, str]:
    """``systemctl show -p NAME,... UNIT``: each property systemctl printed -> its value ({} where it printed none)."""
    out = subprocess.run(["systemctl", "show", "-p", ",".join(names), unit], capture_output=True, text=True,
                         check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
