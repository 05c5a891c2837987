#!/usr/bin/env python3
"""Wait until a systemd-managed llama-server answers /health, or fail fast when it crashes.

Runs on the managed host with the standard library only. Exit 0 when healthy; 1 with a reason
(unit failed, restarted, timed out) and the journal tail otherwise.
"""

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request


def unit_state(unit: str) -> dict:
    out = subprocess.run(["systemctl", "show", "-p", "ActiveState,SubState,NRestarts,MainPID,Result", unit],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(unit: str, since: str) -> str:
    out = subprocess.run(["journalctl", "-u", unit, "--since", since, "-n", "25", "--no-pager", "-o", "cat"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--since", default="-10min")
    args = ap.parse_args()
    start = unit_state(args.unit)
    restarts0 = int(start.get("NRestarts", "0") or 0)
    deadline = time.monotonic() + args.timeout
    last = ""
    while time.monotonic() < deadline:
        st = unit_state(args.unit)
        if st.get("ActiveState") == "failed" or int(st.get("NRestarts", "0") or 0) > restarts0:
            print(json.dumps({"ok": False, "reason": f"{args.unit} crashed ({st})",
                              "journal": journal(args.unit, args.since)}))
            return 1
        try:
            with urllib.request.urlopen(args.url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    print(json.dumps({"ok": True, "state": st}))
                    return 0
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(1)
    print(json.dumps({"ok": False, "reason": f"no healthy answer within {args.timeout:.0f}s ({last})",
                      "journal": journal(args.unit, args.since)}))
    return 1


if __name__ == "__main__":
    sys.exit(main())
