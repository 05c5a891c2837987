"""The models directory as the models role leaves it, before it sends anything (standard library only; run as root
by roles/models/tasks/install.yml): what took six module runs takes one.

  models_place.py --dir D --owner U --group G --dir-mode 0755 --file-mode 0644 [--expect FILE=SHA256]... [--check]

In this order:
1. ``D`` exists, with that owner, group and mode;
2. the sha256 of each model (``FILE``, a file name in ``D``) already there (null when it is not);
3. ``D/.incoming`` (where the role's copies arrive: root only, 0700) exists and is emptied of what an interrupted
   copy left there (the deploy holds the host's deploy lock: no other deploy is sending into it);
4. each model already there as its verified file (``SHA256``) gets the owner, group and file mode (the role sends
   only the others).

It prints {"changed": [what it changed], "sha256": {FILE: hex | null}, "removed": [{"path", "size"}]}; with
``--check`` it changes nothing and lists what it would change.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import shutil
import sys

from specops.host.files import ensure_attrs, ensure_dir, sha256


def uid(name: str) -> int:
    return int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid


def gid(name: str) -> int:
    return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid


def empty(path: str, check: bool) -> list[dict[str, object]]:
    """Remove everything in ``path`` (hidden entries too); what was there, with sizes."""
    removed: list[dict[str, object]] = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        size = entry.stat(follow_symlinks=False).st_size
        removed.append({"path": entry.path, "size": size})
        if check:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    return removed


def place(directory: str, owner: int, group: int, dir_mode: int, file_mode: int, expect: dict[str, str],
          check: bool) -> dict[str, object]:
    changed = []
    if ensure_dir(directory, dir_mode, check, owner, group):
        changed.append(directory)
    found = {m: sha256(os.path.join(directory, m)) for m in expect}
    incoming = os.path.join(directory, ".incoming")
    if ensure_dir(incoming, 0o700, check, 0, 0):
        changed.append(incoming)
    removed = empty(incoming, check) if os.path.isdir(incoming) else []
    changed += [str(r["path"]) for r in removed]
    for name, want in expect.items():
        path = os.path.join(directory, name)
        if found[name] == want.lower() and ensure_attrs(path, os.stat(path), file_mode, check, owner, group):
            changed.append(path)
    return {"changed": changed, "sha256": found, "removed": removed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--owner", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--dir-mode", required=True)
    ap.add_argument("--file-mode", required=True)
    ap.add_argument("--expect", action="append", default=[], metavar="FILE=SHA256",
                    help="a model's file name in --dir and its verified sha256")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    expect = dict(e.split("=", 1) for e in args.expect)
    try:
        out = place(args.dir, uid(args.owner), gid(args.group), int(args.dir_mode, 8), int(args.file_mode, 8),
                    expect, args.check)
    except (KeyError, OSError, ValueError) as exc:   # an unknown user or group, a path that cannot be one, a bad mode
        print(f"models_place: {args.dir}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
