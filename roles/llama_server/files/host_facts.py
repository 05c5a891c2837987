#!/usr/bin/env python3
"""What the deploy preflight needs to know from the host, read without changing anything (stdlib only):
the API key file's stat (never its content) and which process, in which systemd unit, listens on each port.
Prints JSON: {"key_file": {...} | null, "ports": {"8080": {"pid", "comm", "unit"} | null}}."""

from __future__ import annotations

import argparse
import json
import os
import re


def key_file(path: str) -> dict | None:
    if not path:
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"exists": False}
    except OSError as exc:
        return {"exists": False, "error": exc.strerror}
    return {"exists": True, "mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid, "size": st.st_size}


def listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def owner(inodes: set[str]) -> dict | None:
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") not in wanted:
                    continue
            except OSError:
                continue
            info = {"pid": int(pid), "comm": "", "unit": ""}
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    info["comm"] = fh.read().strip()
                with open(f"/proc/{pid}/cgroup") as fh:
                    units = re.findall(r"/([^/\s]+\.service)(?=/|$)", fh.read(), re.M)
                info["unit"] = units[-1] if units else ""
            except OSError:
                pass
            return info
    return {"pid": None, "comm": "unknown process", "unit": ""}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--key-file", default="")
    parser.add_argument("--port", type=int, action="append", default=[])
    args = parser.parse_args()
    print(json.dumps({"key_file": key_file(args.key_file),
                      "ports": {str(p): owner(listening_inodes(p)) for p in args.port}}))


if __name__ == "__main__":
    main()
