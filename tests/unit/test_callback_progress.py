"""plugins/callback/specops_default.py with ansible-playbook itself: a polled task whose command prints JSON with a
``progress`` line shows that line when it moves (the tune's poll, every 15 s for its whole budget, printed "FAILED -
RETRYING ... (40 retries left)" at each look); any other retry prints what Ansible's default prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

POLL = """import json, pathlib, sys
p = pathlib.Path(sys.argv[1]); n = int(p.read_text()) if p.exists() else 0; p.write_text(str(n + 1))
print(json.dumps({"done": n >= 3, "progress": ["tune: probes - plain", "tune: probes - plain",
                  "tune: measure - block 1", "tune: done"][n]}))
"""

PLAYBOOK = """- hosts: localhost
  gather_facts: false
  tasks:
    - name: Poll a long job
      ansible.builtin.command: "{python} {poll} {counter}"
      register: _poll
      until: _poll.rc != 0 or (_poll.stdout | from_json).done
      retries: 5
      delay: 0
      changed_when: false
    - name: A plain retry
      ansible.builtin.command: "false"
      register: _plain
      until: _plain.rc == 0
      retries: 1
      delay: 0
      ignore_errors: true
"""


def test_a_polled_task_shows_its_progress_line_when_it_moves_and_other_retries_are_untouched(tmp_path: Path) -> None:
    (tmp_path / "poll.py").write_text(POLL)
    (tmp_path / "play.yml").write_text(PLAYBOOK.format(python=sys.executable, poll=tmp_path / "poll.py",
                                                       counter=tmp_path / "n"))
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    poll = text[text.index("TASK [Poll a long job]"):text.index("TASK [A plain retry]")]
    assert [line for line in poll.splitlines() if line.startswith("   ... ")] == [
        "   ... [localhost] tune: probes - plain", "   ... [localhost] tune: measure - block 1"], poll
    assert "FAILED - RETRYING" not in poll
    plain = text[text.index("TASK [A plain retry]"):]
    assert "FAILED - RETRYING: [localhost]: A plain retry (1 retries left)." in plain, plain
