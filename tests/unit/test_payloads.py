"""The module payloads kept between deploys (specops.payloads, the specops_preload callback): a second run of a
playbook takes ansible-core's module zips from the kept ones instead of building them (Ansible's own debug output
says which), runs the modules the same, and keeps nothing of a module that is not ansible-core's own."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import ansible
import pytest
from ansible.release import __version__ as ansible_version

from specops import payloads

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(ansible.__file__).parent


def payload(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return base64.b64encode(buf.getvalue())


def test_only_ansible_cores_own_modules_are_kept(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    good = payload({"ansible/modules/command.py": b"print(1)\n"})
    (run / "ansible.modules.command-ZIP_DEFLATED").write_bytes(good)
    (run / "ansible.modules.not_a_module_of_core-ZIP_DEFLATED").write_bytes(good)  # a role's own module
    (run / "ansible_collections.community.general.plugins.modules.ufw-ZIP_DEFLATED").write_bytes(good)
    (run / "ansible.modules.stat-ZIP_DEFLATED").write_bytes(b"not base64 zip at all")
    kept = tmp_path / "kept" / "k"
    assert payloads.keep(run, kept, ROOT) == 1
    assert sorted(p.name for p in kept.iterdir()) == ["ansible.modules.command-ZIP_DEFLATED"]
    # and back: into an empty run cache; a payload already there is never replaced
    fresh = tmp_path / "fresh"
    assert payloads.restore(kept, fresh, ROOT) == 1
    assert (fresh / "ansible.modules.command-ZIP_DEFLATED").read_bytes() == good
    (fresh / "ansible.modules.command-ZIP_DEFLATED").write_bytes(b"theirs")
    assert payloads.restore(kept, fresh, ROOT) == 0
    assert (fresh / "ansible.modules.command-ZIP_DEFLATED").read_bytes() == b"theirs"


def test_a_broken_kept_payload_is_not_restored(tmp_path):
    kept = tmp_path / "kept"
    kept.mkdir()
    whole = payload({"a.py": b"x = 1\n"})
    (kept / "ansible.modules.command-ZIP_DEFLATED").write_bytes(whole[: len(whole) // 2])  # cut short
    (kept / "ansible.modules.file-ZIP_DEFLATED").write_bytes(whole)
    run = tmp_path / "run"
    assert payloads.restore(kept, run, ROOT) == 1
    assert [p.name for p in run.iterdir()] == ["ansible.modules.file-ZIP_DEFLATED"]


def test_the_key_moves_when_a_module_file_changes(tmp_path):
    fake = tmp_path / "ansible"
    (fake / "modules").mkdir(parents=True)
    (fake / "module_utils").mkdir()
    (fake / "modules" / "command.py").write_text("a\n")
    (fake / "module_utils" / "basic.py").write_text("b\n")
    first = payloads.key(fake, "2.18.0")
    assert payloads.key(fake, "2.18.0") == first
    assert payloads.key(fake, "2.18.1") != first
    (fake / "module_utils" / "basic.py").write_text("bb\n")
    assert payloads.key(fake, "2.18.0") != first


PLAY = """- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.command: {argv: [echo, "hello from the module"]}
      register: out
      changed_when: false
    - ansible.builtin.assert: {that: out.stdout == 'hello from the module'}
"""


def run_play(tmp_path: Path, cache: Path) -> str:
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "SPECOPS_CACHE": str(cache), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_DEBUG": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp")}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
            "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")]
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + out.stderr


def test_a_second_run_uses_the_kept_payload_and_runs_the_same(tmp_path):
    cache = tmp_path / "cache"
    first = run_play(tmp_path, cache)
    assert "ANSIBALLZ: Creating module" in first
    key = payloads.key(ROOT, ansible_version)
    kept = cache / "ansiballz" / key / "ansible.modules.command-ZIP_DEFLATED"
    assert kept.is_file() and payloads.valid(kept.read_bytes())
    second = run_play(tmp_path, cache)
    assert "ANSIBALLZ: using cached module" in second
    assert "ANSIBALLZ: Creating module" not in second
