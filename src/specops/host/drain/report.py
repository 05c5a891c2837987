"""The drain's result: one JSON line on stdout; a failed start's line on stderr too, and exit status 1."""

from __future__ import annotations

import json
import sys


def report(out: dict) -> int:
    print(json.dumps(out))
    if "start_failed" in out:
        print(out["start_failed"], file=sys.stderr)  # the deploy's one-line failure quotes this line
        return 1
    return 0
