"""Run one host script: ``python3 host-scripts-ID.pyz SCRIPT ARGS...`` (``drain --unit x``), or
``python -m specops.host SCRIPT ARGS...`` where specops is installed.

The zip the deploy ships (:mod:`specops.hostzip`) runs :func:`main` first; Python puts a zip it runs on sys.path,
so each script imports specops.host.hostlib and specops.keyfile from it as it does from the package."""

from __future__ import annotations

import runpy
import sys

# the modules of specops.host that are scripts (tests/unit/test_host_code.py: every module with a main but hostlib)
SCRIPTS = ("build_progress", "deploy_lock", "disk_facts", "drain", "files", "haproxy_admin", "host_facts",
           "models_place", "probe", "server_help", "speed_probe", "unit_state", "verify_units", "wait_healthy")
USAGE = f"usage: python3 <host scripts zip> SCRIPT [ARGS...]  (SCRIPT: {', '.join(SCRIPTS)})"


def main() -> None:
    """Run ``sys.argv[1]`` as ``__main__`` with the rest of the arguments (its own ``sys.argv[1:]``)."""
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(USAGE)
    name = sys.argv.pop(1)
    if name not in SCRIPTS:
        sys.exit(f"{name}: no such host script\n{USAGE}")
    runpy.run_module(f"specops.host.{name}", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
