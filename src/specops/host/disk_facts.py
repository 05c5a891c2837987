"""Free space where the deploy will write, read on the host (standard library only; reads, never writes).

  disk_facts.py ITEMS_JSON    ITEMS_JSON: [{"what", "variable", "dir", "file", "size"}, ...]

For each item: the filesystem that receives ``dir`` (its nearest existing ancestor: the deploy creates the
rest), that filesystem's device, mount point and free bytes (for an unprivileged writer: f_bavail), and the size
of ``dir/file`` when it is already there (None otherwise). Prints {"items": [...]} (specops.room reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def mount_of(path: str) -> str:
    dev = os.stat(path).st_dev
    while path != "/" and os.stat(os.path.dirname(path)).st_dev == dev:
        path = os.path.dirname(path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("items", metavar="ITEMS_JSON", help='[{"what", "variable", "dir", "file", "size"}, ...]')
    args = ap.parse_args(argv)
    out = []
    for item in json.loads(args.items):
        base = existing(item["dir"])
        vfs = os.statvfs(base)
        target = os.path.join(item["dir"], item["file"]) if item.get("file") else ""
        present = os.stat(target).st_size if target and os.path.isfile(target) else None
        out.append({**item, "dev": os.stat(base).st_dev, "mount": mount_of(base),
                    "free": vfs.f_bavail * vfs.f_frsize, "present_size": present})
    print(json.dumps({"items": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
