"""Run one host script of this directory's zip: ``python3 host-scripts-ID.pyz SCRIPT ARGS...`` (``drain --unit x``).

ansible.builtin.script ships one file, and the scripts share modules (hostlib.py, keyfile.py), so the deploy zips
this directory (tasks/host_scripts.yml) and runs the zip. Python puts a zip it runs first on sys.path: each script
imports the shared modules from it as it does beside them in the checkout (``python3 drain.py ARGS``)."""

import runpy
import sys

if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
    sys.exit("usage: python3 <host scripts zip> SCRIPT [ARGS...]  (SCRIPT: drain, probe, speed_probe, host_facts, ...)")
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
