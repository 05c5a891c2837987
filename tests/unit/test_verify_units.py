"""specops.host.verify_units, the preflight's check on the host (roles/systemd_unit/tasks/verify.yml): the units the
controller rendered, written to a scratch directory under their own names and verified one by one by a real
``systemd-analyze verify``; what it prints is what specops.deploycheck.verify_problems reads, and nothing stays."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specops import deploycheck
from specops.host import verify_units

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")

GOOD = "[Unit]\nDescription=fine\n\n[Service]\nExecStart=/bin/true\n\n[Install]\nWantedBy=multi-user.target\n"
# a value systemd misreads: the deploy must stop here, naming the unit
BAD = GOOD.replace("ExecStart=/bin/true", "ExecStart=/bin/true\nRestart=sometimes")


def _run(units: dict[str, str], tmp: Path) -> dict:
    """The script as the host runs it, its temporary directory under ``tmp``."""
    arg = base64.b64encode(json.dumps(units).encode()).decode()
    src = Path(verify_units.__file__).resolve().parents[2]
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp)}
    done = subprocess.run([sys.executable, "-m", "specops.host", "verify_units", "--units", arg],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def test_each_unit_is_verified_under_its_own_name_and_a_bad_one_is_named(tmp_path: Path):
    out = _run({"specops-good.service": GOOD, "specops-bad.service": BAD}, tmp_path)
    assert [r["unit"] for r in out["results"]] == ["specops-good.service", "specops-bad.service"]
    problems = deploycheck.verify_problems(out["results"], ["specops-good.service", "specops-bad.service"])
    assert len(problems) == 1 and problems[0].startswith("the rendered unit specops-bad.service does not verify ("), \
        problems
    assert "Restart" in problems[0] or "sometimes" in problems[0], problems
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


def test_a_missing_binary_is_the_one_complaint_let_through_before_the_install(tmp_path: Path):
    unit = GOOD.replace("/bin/true", "/opt/specops-not-installed/bin/llama-server")
    out = _run({"specops-x.service": unit}, tmp_path)
    args = (["specops-x.service"], "/opt/specops-not-installed/bin/llama-server")
    assert deploycheck.verify_problems(out["results"], *args, binary_installed=False) == []
    assert deploycheck.verify_problems(out["results"], *args, binary_installed=True) != []


def test_a_name_with_a_path_is_refused():
    with pytest.raises(SystemExit, match="not a unit file name"):
        verify_units.verify({"../etc/x.service": GOOD})
