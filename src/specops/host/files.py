"""Look at a few small files, or put a few in place, in one run on the host (standard library only): what took a
deploy one module run per file (stat for a checksum, slurp, copy) takes one.

  files.py look [--sha256 P]... [--content P]...      reads only
  files.py put [--dir P]... --steps JSON [--mode 0644] [--content P]... [--check]   writes

``look`` prints {"sha256": {P: hex | null}, "content": {P: base64 | null}} (null: no such file); a ``content``
entry is what ansible.builtin.slurp returns as its ``content``, so the role's filters read it as they read a slurp.

``put`` first makes each ``--dir`` (0755; its mode put right when it is there), then takes its steps in order, each
``{"dest": P, "content": TEXT}`` or ``{"dest": P, "src": P}`` (a copy of a file on the host), and writes a
destination only when its bytes differ (whole, under another name, then renamed, so a reader never sees half a
file), with ``--mode`` either way; a missing ``src`` is said in one line and stops it (exit 2, nothing written after
it). It prints {"changed": [P, ...], "sha256": {DEST: hex}} and, with ``--content P``, what ``look`` says of P after
the steps; with ``--check`` it writes nothing and says what it would change (each sha256: what the step would
write).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import stat
import sys
from typing import Any


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def sha256(path: str) -> str | None:
    """The file's sha256 (hex), read in blocks (a model is gigabytes); None when there is no such file."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def look(sha: list[str], content: list[str]) -> dict[str, dict[str, str | None]]:
    found = {p: read(p) for p in content}
    return {"sha256": {p: sha256(p) for p in sha},
            "content": {p: None if b is None else base64.b64encode(b).decode("ascii") for p, b in found.items()}}


def put_one(dest: str, data: bytes, mode: int, check: bool) -> bool:
    """``data`` at ``dest`` with ``mode``; True when that changed anything."""
    same = read(dest) == data
    try:
        mode_ok = (os.stat(dest).st_mode & 0o7777) == mode
    except FileNotFoundError:
        mode_ok = False
    if check or (same and mode_ok):
        return not (same and mode_ok)
    if same:
        os.chmod(dest, mode)
        return True
    tmp = f"{dest}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, dest)
    return True


class Missing(Exception):
    """A step's ``src`` is not there."""


def ensure_dir(path: str, mode: int, check: bool, owner: int | None = None, group: int | None = None) -> bool:
    """``path`` a directory with ``mode`` (and ``owner``, ``group`` where given); True when that changed anything.
    A symlink to a directory is followed, as ansible.builtin.file follows it; a path that is there but no directory
    is an error (NotADirectoryError)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not check:
            os.makedirs(path, exist_ok=True)
            if owner is not None and group is not None:
                os.chown(path, owner, group)
            os.chmod(path, mode)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    return ensure_attrs(path, st, mode, check, owner, group)


def ensure_attrs(path: str, st: os.stat_result, mode: int, check: bool, owner: int | None = None,
                 group: int | None = None) -> bool:
    """``path`` (whose stat is ``st``) with ``mode`` (and ``owner``, ``group`` where given); True when that changed
    anything."""
    changed = False
    if owner is not None and group is not None and (st.st_uid, st.st_gid) != (owner, group):
        changed = True
        if not check:
            os.chown(path, owner, group)
    if stat.S_IMODE(st.st_mode) != mode:
        changed = True
        if not check:
            os.chmod(path, mode)
    return changed


def put(steps: list[dict[str, str]], mode: int, check: bool, dirs: tuple[str, ...] = ()) -> dict[str, Any]:
    changed = [d for d in dirs if ensure_dir(d, 0o755, check)]
    sums: dict[str, str] = {}
    written: dict[str, bytes] = {}   # what the steps so far put (or, with --check, would put) there
    for step in steps:
        if "src" in step:
            data = written.get(step["src"], read(step["src"]))
            if data is None:
                raise Missing(f"files put: {step['src']}: no such file (to copy to {step['dest']}); "
                              f"changed before it: {', '.join(changed) or 'nothing'}")
        else:
            data = step["content"].encode("utf-8")
        if put_one(step["dest"], data, mode, check):
            changed.append(step["dest"])
        written[step["dest"]] = data
        sums[step["dest"]] = hashlib.sha256(data).hexdigest()
    return {"changed": changed, "sha256": sums}


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lk = sub.add_parser("look")
    lk.add_argument("--sha256", action="append", default=[], metavar="PATH")
    lk.add_argument("--content", action="append", default=[], metavar="PATH")
    pt = sub.add_parser("put")
    pt.add_argument("--dir", action="append", default=[], metavar="PATH", help="a directory to make first (0755)")
    pt.add_argument("--steps", required=True, help='JSON: [{"dest": P, "content": TEXT} | {"dest": P, "src": P}]')
    pt.add_argument("--mode", default="0644")
    pt.add_argument("--content", action="append", default=[], metavar="PATH", help="then this file's content")
    pt.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.cmd == "look":
        print(json.dumps(look(args.sha256, args.content)))
        return 0
    steps = json.loads(args.steps)
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "dest" in s and ("src" in s or "content" in s)
                                              for s in steps):
        print('files put: --steps must be a JSON list of {"dest", "content"} or {"dest", "src"}', file=sys.stderr)
        return 2
    try:
        done = put(steps, int(args.mode, 8), args.check, tuple(args.dir))
    except (Missing, OSError) as exc:   # a missing source; a --dir that is there but no directory
        print(exc, file=sys.stderr)
        return 2
    print(json.dumps({**done, **({"content": look([], args.content)["content"]} if args.content else {})}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
