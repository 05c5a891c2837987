"""lab/specops_lab/zipcache.py, which every lab host's python3 imports (Ansible runs its modules from zips, and
Python compiles a zip's sources on every import): the same source imported again from another zip is not compiled
again, runs the same, and its traceback names the zip it came from, not the first one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[2] / "lab" / "specops_lab"

SCRIPT = r"""
import os, sys, zipfile
sys.path.insert(0, sys.argv[1])
import zipcache
compiled = []
real = zipcache._compile
zipcache._compile = lambda path, source: (compiled.append(path), real(path, source))[1]
for n in (1, 2):
    payload = os.path.join(sys.argv[2], f"payload{n}.zip")
    with zipfile.ZipFile(payload, "w") as zf:
        zf.writestr("m.py", "def boom():\n    raise ValueError('boom')\nANSWER = 42\n")
    sys.path.insert(0, payload)
    sys.modules.pop("m", None)
    import m
    try:
        m.boom()
    except ValueError as e:
        print(n, m.ANSWER, e.__traceback__.tb_next.tb_frame.f_code.co_filename)
    sys.path.remove(payload)
print("compiled", len(compiled))
"""


def test_a_zip_source_is_compiled_once_and_keeps_its_own_name(tmp_path: Path) -> None:
    cache = tmp_path / "pyc"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(LAB), str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, "SPECOPS_LAB_PYC": str(cache)}, check=True).stdout.splitlines()
    assert out == [f"1 42 {tmp_path}/payload1.zip/m.py", f"2 42 {tmp_path}/payload2.zip/m.py", "compiled 1"], out
    assert len(list(cache.glob("*/*"))) == 1


CONTROLLER = r"""
import os, sys, zipfile
payload = os.path.join(sys.argv[1], "payload.zip")
with zipfile.ZipFile(payload, "w") as zf:
    zf.writestr("m.py", "ANSWER = 42\n")
sys.path.insert(0, payload)
import m, sitecustomize
print(m.ANSWER, sitecustomize.__file__)
"""


def test_the_controllers_pythons_under_the_suite_keep_their_zips_code_too(tmp_path: Path, monkeypatch) -> None:
    """tests/lab.py controller_zipcache: a Python started with its environment (as tests/conftest.py sets it for the
    whole suite) imports zipcache.py as its sitecustomize and keeps the code of a zip's module under the cache."""
    from tests import lab

    monkeypatch.setenv("SPECOPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    env = lab.controller_zipcache()
    site = tmp_path / "cache" / "lab" / "controller-site"
    assert env == {"PYTHONPATH": f"{site}{os.pathsep}/somewhere/else",
                   "SPECOPS_LAB_PYC": str(tmp_path / "cache" / "lab" / "controller-pyc")}
    assert (site / "sitecustomize.py").read_bytes() == (LAB / "zipcache.py").read_bytes()
    assert lab.controller_zipcache() == env  # again (every xdist worker calls it): the same, the file kept
    out = subprocess.run([sys.executable, "-c", CONTROLLER, str(tmp_path)], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True).stdout.split()
    assert out == ["42", str(site / "sitecustomize.py")], out
    assert len(list((tmp_path / "cache" / "lab" / "controller-pyc").glob("*/*"))) == 1
