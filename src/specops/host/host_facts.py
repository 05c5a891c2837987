"""What the deploy preflight needs to know from the host, read without changing anything (stdlib only):
the API key file's stat (its target's, and the target named, when it is a symlink) and the shape of its lines
(never the key), which process, in which systemd unit, listens on each port, and whether the service user can
reach each model file.
Prints JSON: {"key_file": {...} | null, "ports": {"8080": {"pid", "comm", "unit"} | null},
"paths": {"llama_server_target_model": {...}}}; with ``--tokens-file`` (TabbyAPI's api_tokens.yml) also
"tokens_file": its stat and which of api_key/admin_key it sets (never the keys)."""

from __future__ import annotations

import argparse
import contextlib
import grp
import json
import os
import pwd
import re
import stat

from specops import keyfile
from specops.host.hostlib import tcp_rows

# what the unit hides from the service: ProtectHome=yes, PrivateTmp=yes
HIDDEN = {"/home": "protect-home", "/root": "protect-home", "/run/user": "protect-home",
          "/tmp": "private-tmp", "/var/tmp": "private-tmp"}


def link_facts(path: str) -> dict:
    """When ``path`` is a symlink: its text and what it finally resolves to (the stat below is the target's,
    so a problem found there must name it); {} otherwise."""
    try:
        if not os.path.islink(path):
            return {}
        return {"symlink": os.readlink(path), "target": os.path.realpath(path)}
    except OSError:
        return {}


def key_file(path: str) -> dict | None:
    if not path:
        return None
    link = link_facts(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"exists": False, **link}
    except OSError as exc:
        return {"exists": False, "error": exc.strerror, **link}
    facts: dict = {"exists": True, "mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid, "size": st.st_size,
                   **link}
    if stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb") as fh:
                facts["content"] = key_lines(fh.read(1024 * 1024))
        except OSError as exc:
            facts["content"] = {"error": exc.strerror}
    return facts


def tokens_file(path: str) -> dict | None:
    """TabbyAPI's api_tokens.yml: the stat of ``key_file`` and whether ``api_key:``/``admin_key:`` have a value."""
    facts = key_file(path)
    if not facts or not facts.get("exists"):
        return facts
    facts.pop("content", None)
    tokens = {"api_key": False, "admin_key": False}
    if stat.S_ISREG(facts["mode"]):
        try:
            with open(path, "rb") as fh:
                for line in fh.read(1024 * 1024).decode("utf-8", "replace").splitlines():
                    match = re.match(r"(api_key|admin_key)\s*:\s*(\S.*?)\s*$", line)
                    if match and match.group(2) not in ("''", '""', "null", "~"):
                        tokens[match.group(1)] = True
        except OSError as exc:
            facts["error"] = exc.strerror
    facts["tokens"] = tokens
    return facts


def key_lines(data: bytes) -> dict:
    """The shape of a key file as llama-server reads it (specops.keyfile: its rule, from llama.cpp's source), never the
    key: how many lines and keys, whether it has a CR anywhere, and whether a key has white space at an end or a
    character that is not printable ASCII (no HTTP client could send it)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()   # the final LF ends the last line; getline yields no empty line after it
    keys = keyfile.keys_in(data)
    flaws = {flaw for key in keys for flaw in keyfile.flaws(key)}
    return {"lines": len(lines), "keys": len(keys), "empty": not keys, "cr": b"\r" in data,
            "edge_whitespace": "edge_whitespace" in flaws, "nonprintable": "nonprintable" in flaws}


def listening_inodes(port: int) -> set[int]:
    """The inodes of the sockets listening on ``port`` (IPv4 and IPv6)."""
    return {inode for lport, state, _, inode in tcp_rows() if lport == port and state == "0A"}


def owner(inodes: set[int]) -> dict | None:
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


def _hidden(path: str) -> str:
    return next((why for top, why in HIDDEN.items() if path == top or path.startswith(top + "/")), "")


def _blocker(path: str, st: os.stat_result, gids: set[int], need: int, reason: str = "mode") -> dict:
    try:
        owner_name = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner_name = str(st.st_uid)
    return {"at": path, "reason": reason, "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "owner": owner_name,
            "gid": st.st_gid, "class": "group" if st.st_gid in gids else "other", "need": "x" if need == 1 else "r"}


def allows(st: os.stat_result, gids: set[int], need: int) -> bool:
    """Whether a systemd DynamicUser (owns nothing; member of ``gids`` only) has permission ``need`` (4 = r,
    1 = x): the group bits when the file's group is one of them, else the other bits (from the mode, not
    os.access, so that it holds when this runs as root)."""
    bits = (st.st_mode >> 3) & 7 if st.st_gid in gids else st.st_mode & 7
    return bool(bits & need)


def walk(path: str) -> tuple[list[str], str, bool]:
    """The directories a lookup of ``path`` searches (each needs x), following symlinks as the kernel does, the
    real path it ends at (where it stops when a component is missing) and whether that exists."""
    searched: list[str] = []
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current, links = "/", 0
    while parts:
        name = parts.pop(0)
        searched.append(current)
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            return searched, os.path.join(candidate, *parts) if parts else candidate, False
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > 40:
                raise OSError(f"too many levels of symbolic links at {candidate}")
            target = os.readlink(candidate)
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            current = "/" if target.startswith("/") else current
        elif parts and not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{candidate} is not a directory")
        else:
            current = candidate
    return searched, current, True


def path_access(path: str, gids: set[int]) -> dict:
    """Can the service user (DynamicUser, ProtectHome=yes, PrivateTmp=yes) open ``path`` for reading? The real
    path, and the first component in the way (with its mode and owner) or why the unit hides it."""
    try:
        searched, real, exists = walk(path)
    except OSError as exc:
        return {"path": path, "error": str(exc)}
    facts: dict = {"path": path, "real": real, "exists": exists, "blocked": None}
    for where in [*searched, real]:
        why = _hidden(where)
        if why:
            facts["blocked"] = {"at": where, "reason": why}
            return facts
    for where in searched:
        st = os.stat(where)
        if not allows(st, gids, 1):
            facts["blocked"] = _blocker(where, st, gids, 1)
            return facts
    if exists:
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            facts["blocked"] = {"at": real, "reason": "directory" if stat.S_ISDIR(st.st_mode) else "not-a-file"}
        elif not allows(st, gids, 4):
            facts["blocked"] = _blocker(real, st, gids, 4)
    return facts


def group_ids(names: list[str]) -> set[int]:
    gids: set[int] = set()
    for name in names:
        with contextlib.suppress(KeyError):
            gids.add(grp.getgrnam(name).gr_gid)
    return gids


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--key-file", default="")
    parser.add_argument("--port", type=int, action="append", default=[])
    parser.add_argument("--path", action="append", default=[], metavar="NAME=PATH",
                        help="a file the service must read (an empty PATH is skipped)")
    parser.add_argument("--group", action="append", default=[], help="the unit's SupplementaryGroups")
    parser.add_argument("--tokens-file", default="", help="TabbyAPI's api_tokens.yml")
    args = parser.parse_args()
    gids = group_ids(args.group)
    paths = dict(item.split("=", 1) for item in args.path if "=" in item)
    print(json.dumps({"key_file": key_file(args.key_file),
                      "ports": {str(p): owner(listening_inodes(p)) for p in args.port},
                      "paths": {name: path_access(path, gids) for name, path in paths.items() if path},
                      **({"tokens_file": tokens_file(args.tokens_file)} if args.tokens_file else {})}))


if __name__ == "__main__":
    main()
