"""One deploy at a time on this host: a lock file naming its holder (run id, controller, PID, start time).

Run by the deploy_lock role with Ansible's ``script`` module on the host (standard library only).

  deploy_lock.py show    --lock P                      the holder, or null
  deploy_lock.py acquire --lock P --me JSON --timeout S [--stale-after S] [--dead-run ID] [--break-lock]
  deploy_lock.py release --lock P --run-id ID

Each prints one JSON object. ``acquire`` takes a free lock at once, keeps one this run already holds (a second
play of the same run), takes over a lock whose run the controller saw dead (``--dead-run``: the holder's own
controller no longer runs that PID), one older than ``--stale-after`` seconds, or any with ``--break-lock``
(each said in ``took_over``); otherwise it waits up to ``--timeout`` seconds for the holder to release it and then
exits 3 with ``acquired: false`` and the holder. The check-and-write is serialised by ``flock`` on
``P.guard``, so two runs never both take it. ``release`` removes the lock only when this run holds it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

POLL_S = 1.0


@contextmanager
def guarded(path: str) -> Iterator[None]:
    with open(path + ".guard", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def read_holder(path: str) -> dict[str, Any] | None:
    """The lock's holder; a file that is not a holder (empty, cut short by a crash) counts as a stale holder."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        holder = None
    if not isinstance(holder, dict) or not holder.get("run_id"):
        st = os.stat(path)
        return {"run_id": "", "unreadable": True, "taken_at": st.st_mtime}
    return holder


def write_holder(path: str, me: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({**me, "taken_at": time.time()}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def stale_reason(holder: dict[str, Any], dead_run: str, stale_after: float, break_lock: bool) -> str:
    """Why this holder's lock may be taken over ('' = it may not)."""
    if holder.get("unreadable"):
        return "an unreadable lock file (a run killed while writing it)"
    if dead_run and holder.get("run_id") == dead_run:
        return "its run is no longer running on its controller"
    age = time.time() - float(holder.get("taken_at") or 0)
    if stale_after > 0 and age > stale_after:
        return f"taken {age / 3600:.1f} h ago, longer than specops_deploy_lock_stale_after ({stale_after:.0f} s)"
    if break_lock:
        return "specops_deploy_lock_break=true"
    return ""


def acquire(args: argparse.Namespace) -> int:
    me = json.loads(args.me)
    os.makedirs(os.path.dirname(args.lock) or ".", mode=0o755, exist_ok=True)
    deadline = time.monotonic() + max(0.0, args.timeout)
    waited_from = time.monotonic()
    waited_on: dict[str, Any] | None = None
    while True:
        with guarded(args.lock):
            holder = read_holder(args.lock)
            took_over = None
            if holder is not None and holder.get("run_id") == me["run_id"]:
                print(json.dumps({"acquired": True, "path": args.lock, "already_held": True, "holder": holder}))
                return 0
            if holder is not None:
                why = stale_reason(holder, args.dead_run, args.stale_after, args.break_lock)
                if why:
                    took_over = {"holder": holder, "why": why}
                    holder = None
            if holder is None:
                write_holder(args.lock, me)
                print(json.dumps({"acquired": True, "path": args.lock, "took_over": took_over, "waited_s":
                                  round(time.monotonic() - waited_from, 1), "waited_on": waited_on}))
                return 0
        if waited_on is None and time.monotonic() < deadline:
            print(f"waiting for run {holder.get('run_id')} (pid {holder.get('pid')} on controller "
                  f"{holder.get('controller')}) to release {args.lock}", file=sys.stderr, flush=True)
        waited_on = holder
        if time.monotonic() >= deadline:
            print(json.dumps({"acquired": False, "path": args.lock, "holder": holder,
                              "waited_s": round(time.monotonic() - waited_from, 1)}))
            return 3
        time.sleep(POLL_S)


def release(args: argparse.Namespace) -> int:
    if not os.path.isdir(os.path.dirname(args.lock) or "."):
        print(json.dumps({"released": False, "holder": None}))
        return 0
    with guarded(args.lock):
        holder = read_holder(args.lock)
        if holder is not None and holder.get("run_id") == args.run_id:
            os.unlink(args.lock)
            print(json.dumps({"released": True}))
            return 0
    print(json.dumps({"released": False, "holder": holder}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show")
    show.add_argument("--lock", required=True)
    acq = sub.add_parser("acquire")
    acq.add_argument("--lock", required=True)
    acq.add_argument("--me", required=True, help="this run's holder record (JSON with run_id)")
    acq.add_argument("--timeout", type=float, default=600.0)
    acq.add_argument("--stale-after", type=float, default=0.0)
    acq.add_argument("--dead-run", default="")
    acq.add_argument("--break-lock", action="store_true")
    rel = sub.add_parser("release")
    rel.add_argument("--lock", required=True)
    rel.add_argument("--run-id", required=True)
    args = p.parse_args(argv)
    if args.cmd == "show":
        print(json.dumps({"holder": read_holder(args.lock) if os.path.exists(args.lock) else None}))
        return 0
    return acquire(args) if args.cmd == "acquire" else release(args)


if __name__ == "__main__":
    sys.exit(main())
