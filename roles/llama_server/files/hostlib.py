"""What the host scripts share (standard library only): the API key header they send, how many of llama-server's
slots are busy in a /slots answer, and the kernel's TCP tables.

It sits beside them here and in the zip the deploy ships (tasks/host_scripts.yml), as does keyfile.py (a link to
src/specops/keyfile.py: llama-server's own rule for --api-key-file, and the one reader of that file kind)."""

from __future__ import annotations

from keyfile import first_key


def auth_headers(key_file: str | None) -> dict[str, str]:
    """The Authorization header with the first key of ``key_file`` as llama-server reads the file (keyfile.py;
    the deploy's first play refuses a file whose first key no client can send); {} without a file."""
    return {"Authorization": f"Bearer {first_key(key_file)}"} if key_file else {}


def busy_slots(slots: object) -> int | None:
    """How many slots of a /slots answer are processing a request; None when the answer is not a list."""
    if not isinstance(slots, list):
        return None
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))


def tcp_rows(pid: int | None = None) -> list[tuple[int, str, int, int]]:
    """(local port, state, remote port, inode) of the TCP sockets in ``pid``'s network namespace (None: this
    process's), from the kernel's tables /proc/[PID/]net/tcp{,6}."""
    rows = []
    base = f"/proc/{pid}/net" if pid is not None else "/proc/net"
    for table in (f"{base}/tcp", f"{base}/tcp6"):
        try:
            with open(table) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9:
                rows.append((int(f[1].rsplit(":", 1)[1], 16), f[3], int(f[2].rsplit(":", 1)[1], 16), int(f[9])))
    return rows
