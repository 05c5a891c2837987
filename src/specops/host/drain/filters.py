"""The hold by socket filters: the drain takes the server's own sockets (pidfd_getfd) and filters them, so that no
new connection and no new request on an open one reaches it; the filters go with the process."""

from __future__ import annotations

import contextlib
import os
import platform
import socket

from specops.host.drain.bpf import DROP_ALL, DROP_DATA, program
from specops.host.drain.connections import LISTEN, LIVE, socket_fds
from specops.host.hostlib import tcp_rows

SYS_PIDFD_GETFD = 438        # pidfd_getfd(2): one number on every architecture but alpha, ia64 and mips
SO_ATTACH_FILTER, SO_DETACH_FILTER = 26, 27


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
