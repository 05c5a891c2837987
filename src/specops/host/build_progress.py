"""Run the compile and keep a one-line progress summary in a file while it runs.

Ansible shows a task's output only when it ends, and a cold llama.cpp compile takes ~9 minutes on 2 cores.
This wrapper (standard library only) runs the command, follows ninja's ``[n/N]`` lines and rewrites
``--progress FILE`` every ``--every`` seconds ("compile: [412/650] 63%, 5m10s, ~3m left"): ``tail -f`` it, or
let ``scripts/demo`` print it. On exit it prints the last lines of the output for Ansible and exits with the
command's status.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time

STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


def fmt(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s"


def write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--progress", required=True)
    ap.add_argument("--every", type=float, default=15.0)
    ap.add_argument("--label", default="compile")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    os.makedirs(os.path.dirname(os.path.abspath(args.progress)), exist_ok=True)
    t0 = last = time.monotonic()
    tail: collections.deque = collections.deque(maxlen=60)
    done = total = 0
    write(args.progress, f"{args.label}: starting")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    for raw in proc.stdout:
        tail.append(raw.decode("utf-8", "replace").rstrip("\n"))
        m = STEP.match(raw)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
        now = time.monotonic()
        if now - last >= args.every:
            last = now
            elapsed = now - t0
            if total:
                left = elapsed / done * (total - done) if done else 0
                write(args.progress, f"{args.label}: [{done}/{total}] {100 * done // total}%, {fmt(elapsed)}, "
                                     f"~{fmt(left)} left")
            else:
                write(args.progress, f"{args.label}: {fmt(elapsed)}")
    rc = proc.wait()
    write(args.progress, f"{args.label}: {'done' if rc == 0 else f'FAILED ({rc})'} after {fmt(time.monotonic() - t0)}"
                         + (f", {done}/{total} steps" if total else ""))
    print("\n".join(tail))
    return rc


if __name__ == "__main__":
    sys.exit(main())
