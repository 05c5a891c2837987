"""Take one server of an HAProxy backend out of the pool and put it back, through HAProxy's runtime API.

  haproxy_admin.py --socket /run/haproxy/admin.sock --backend llama_servers --server web1 drain --timeout 300
  haproxy_admin.py ... ready [--wait-up 60]
  haproxy_admin.py ... state

``drain`` sets the server to DRAIN (HAProxy sends it no new request; those it is serving go on) and waits until
it serves none (``scur`` and ``qcur`` of ``show stat`` both 0) or the timeout passes. ``ready`` sets it back to
READY and, with ``--wait-up``, waits until its health check says UP (it was restarted: HAProxy marks it DOWN until
``/health`` answers again). Prints one JSON object. Standard library only: run by ansible.builtin.script.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import socket
import sys
import time


class AdminError(RuntimeError):
    pass


def command(sock_path: str, line: str, timeout: float = 5.0) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(sock_path)
        except OSError as exc:
            raise AdminError(f"cannot reach HAProxy's runtime API at {sock_path}: {exc.strerror or exc}") from None
        s.sendall(line.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def server_stat(sock_path: str, backend: str, server: str) -> dict[str, str]:
    text = command(sock_path, "show stat")
    rows = list(csv.DictReader(io.StringIO(text.lstrip("# "))))
    for row in rows:
        if row.get("pxname") == backend and row.get("svname") == server:
            return row
    known = sorted({f"{r.get('pxname')}/{r.get('svname')}" for r in rows
                    if r.get("svname") not in ("FRONTEND", "BACKEND")})
    raise AdminError(f"HAProxy has no server {backend}/{server} (it has: {', '.join(known) or 'none'})")


def set_state(sock_path: str, backend: str, server: str, state: str) -> None:
    reply = command(sock_path, f"set server {backend}/{server} state {state}").strip()
    if reply:  # HAProxy answers nothing on success
        raise AdminError(f"set server {backend}/{server} state {state}: {reply}")


def busy(row: dict[str, str]) -> int:
    return int(row.get("scur") or 0) + int(row.get("qcur") or 0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--server", required=True)
    p.add_argument("action", choices=["drain", "ready", "state"])
    p.add_argument("--timeout", type=float, default=300.0, help="drain: longest wait for the requests in flight")
    p.add_argument("--wait-up", type=float, default=0.0, help="ready: wait this long for the health check's UP")
    p.add_argument("--poll", type=float, default=0.1)
    args = p.parse_args()
    try:
        row = server_stat(args.socket, args.backend, args.server)
        out: dict[str, object] = {"server": f"{args.backend}/{args.server}", "was": row.get("status")}
        if args.action == "drain":
            set_state(args.socket, args.backend, args.server, "drain")
            start = time.monotonic()
            while busy(row) and time.monotonic() - start < args.timeout:
                time.sleep(args.poll)
                row = server_stat(args.socket, args.backend, args.server)
            out.update(drained=busy(row) == 0, in_flight=busy(row), waited_s=round(time.monotonic() - start, 2))
        elif args.action == "ready":
            set_state(args.socket, args.backend, args.server, "ready")
            start = time.monotonic()
            row = server_stat(args.socket, args.backend, args.server)
            while args.wait_up and not row.get("status", "").startswith("UP") \
                    and time.monotonic() - start < args.wait_up:
                time.sleep(args.poll)
                row = server_stat(args.socket, args.backend, args.server)
            out.update(up=row.get("status", "").startswith("UP"), waited_s=round(time.monotonic() - start, 2))
        out["status"] = row.get("status")
    except AdminError as exc:
        print(f"haproxy_admin: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
