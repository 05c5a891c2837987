"""``python -m specops`` is the ``specops`` command (issue 29: it said "No module named specops.__main__")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from specops import __version__

SRC = Path(__file__).resolve().parents[2] / "src"


def python_m_specops(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "specops", *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_python_m_specops_runs_the_cli():
    proc = python_m_specops("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"specops {__version__}"


def test_python_m_specops_reports_usage_errors_as_the_cli_does():
    proc = python_m_specops("exporter", "--no-such-flag")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--no-such-flag" in proc.stderr
