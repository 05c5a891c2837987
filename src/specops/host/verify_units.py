"""Check units with ``systemd-analyze verify`` before anything is installed (standard library only; changes nothing:
the units go to a scratch directory that is removed again).

``--units`` is base64 of a JSON object {file name: unit text}, as the deploy rendered them on the controller; each is
written under its own name (systemd names the file in what it says) and verified alone. Prints JSON
{"results": [{"unit": name, "rc": exit status, "stderr": what it said}]}, in the order given: one shape with a
registered loop of ``systemd-analyze verify`` commands (specops.deploycheck.verify_problems reads both).
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def verify(units: dict[str, str]) -> list[dict]:
    out: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="specops-preflight.") as scratch:
        for name, text in units.items():
            if "/" in name or name in ("", ".", ".."):
                raise SystemExit(f"verify_units: {name!r} is not a unit file name")
            path = Path(scratch) / name
            path.write_text(text, encoding="utf-8")
            done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True,
                                  check=False)
            out.append({"unit": name, "rc": done.returncode, "stderr": done.stderr})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--units", required=True, help="base64 of a JSON object {unit file name: unit text}")
    args = p.parse_args(argv)
    units = json.loads(base64.b64decode(args.units))
    json.dump({"results": verify(units)}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
