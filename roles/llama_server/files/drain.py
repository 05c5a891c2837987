#!/usr/bin/env python3
"""Restart (or stop) a llama-server unit without cutting a request it is writing (standard library only).

llama-server stops generating the moment it is told to stop: a stream in flight is cut. So this waits until
none of the server's slots is processing (polling /slots every ``--interval`` seconds, at most ``--timeout``
seconds) and restarts the unit at that moment; past the deadline it restarts anyway and says how many
requests it cut. Prints JSON: {"drained", "waited_s", "busy_at_restart", "stop_s", "restart_s", "slots"}.
A request that arrives in the few milliseconds between the last look and the stop finds the server
stopping; the port answers again once the new process listens (the model-load window, measured by tests).
"""

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request


def busy_slots(url: str, headers: dict) -> int | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/slots", headers=headers), timeout=5) as r:
            slots = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(slots, list):
        return None
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))


def read_key(path: str) -> str:
    """The first key as llama-server reads --api-key-file (LF-split, nothing stripped, blank and # lines skipped;
    the deploy's first play refuses a file where that differs from what a client would send)."""
    with open(path, "rb") as fh:
        lines = fh.read().decode("utf-8", "replace").split("\n")
    return next((line for line in lines if line and not line.startswith("#")), "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--api-key-file")
    ap.add_argument("--action", choices=["restart", "stop"], default="restart")
    args = ap.parse_args()
    headers = {"Authorization": f"Bearer {read_key(args.api_key_file)}"} if args.api_key_file else {}
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    busy = busy_slots(args.url, headers)
    out = {"drained": busy in (0, None), "slots": "unreadable" if busy is None else "read"}
    while busy and time.monotonic() < deadline:
        time.sleep(args.interval)
        busy = busy_slots(args.url, headers)
    out.update(drained=not busy, waited_s=round(time.monotonic() - t0, 2), busy_at_restart=busy or 0)
    t1 = time.monotonic()
    subprocess.run(["systemctl", "stop", args.unit], check=True)
    out["stop_s"] = round(time.monotonic() - t1, 2)
    if args.action == "restart":
        subprocess.run(["systemctl", "start", args.unit], check=True)
        out["restart_s"] = round(time.monotonic() - t1, 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
