"""plugins/callback/specops_phases.py with ansible-playbook itself: the run's wall time by phase (compile, models,
tune, speed gate, the rest of the deploy), from the file each task comes from, adding up to the run's wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins" / "callback"))

import specops_phases  # noqa: E402

SLEEP = "- name: {name}\n  ansible.builtin.command: sleep {seconds}\n  changed_when: false\n"
ROLE_FILES = {  # a role file of each phase, each task sleeping a known time
    "llama_cpp/tasks/main.yml": SLEEP.format(name="build", seconds=1.2),
    "models/tasks/main.yml": SLEEP.format(name="fetch", seconds=0.6),
    "llama_server/tasks/main.yml": "- ansible.builtin.include_role: {name: llama_server_tune, tasks_from: run}\n"
                                   "- ansible.builtin.include_role: {name: llama_server_speed_gate}\n"
                                   + SLEEP.format(name="start", seconds=0.3),
    "llama_server_tune/tasks/run.yml": SLEEP.format(name="poll the tune", seconds=1.0),
    "llama_server_speed_gate/tasks/main.yml": SLEEP.format(name="gate", seconds=0.8),
}
PLAYBOOK = """- hosts: all
  gather_facts: false
  roles: [llama_cpp, models, llama_server]
"""


def test_phase_of_reads_the_task_file() -> None:
    assert specops_phases.phase_of("/x/roles/llama_cpp/tasks/build.yml:3") == "compile"
    assert specops_phases.phase_of("/x/roles/models/tasks/fetch.yml:9") == "models"
    assert specops_phases.phase_of("/x/roles/llama_server_tune/tasks/run.yml:1") == "tune"
    assert specops_phases.phase_of("/x/roles/llama_server_tune/tasks/prepare.yml:1") == "tune"
    assert specops_phases.phase_of("/x/roles/llama_server_speed_gate/tasks/decide.yml:1") == "speed gate"
    assert specops_phases.phase_of("/x/roles/llama_server/tasks/reinstall.yml:1") == "speed gate"  # its fallback
    assert specops_phases.phase_of("/x/roles/llama_server/tasks/plain_unit.yml:1") == "speed gate"
    assert specops_phases.phase_of("/x/roles/llama_server/tasks/start.yml:1") == specops_phases.REST
    assert specops_phases.phase_of("/x/deploy.yml:40") == specops_phases.REST
    assert specops_phases.phase_of("") == specops_phases.REST


def test_summary_names_each_phase_that_took_time_in_order_and_the_total() -> None:
    line = specops_phases.summary({"rest of the deploy": 30.2, "tune": 556.0, "compile": 530.4, "models": 0.1})
    assert line == "Wall time by phase: compile 530 s, tune 556 s, rest of the deploy 30 s (total 1117 s)"


def test_a_run_prints_its_wall_time_by_phase_and_the_phases_add_up_to_the_run(tmp_path: Path) -> None:
    for rel, text in ROLE_FILES.items():
        path = tmp_path / "roles" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    phases_file = tmp_path / "phases.json"
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "two,three", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_ROLES_PATH": str(tmp_path / "roles"), "SPECOPS_PHASES_FILE": str(phases_file)}
    started = time.monotonic()
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    wall = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    seconds = json.loads(phases_file.read_text())
    # two hosts run each task side by side: a task's time is counted once, at least its own sleep
    for phase, slept in (("compile", 1.2), ("models", 0.6), ("tune", 1.0), ("speed gate", 0.8)):
        # and no more than its sleep plus the run's whole time beyond every sleep (4.2 s slept in all)
        assert slept - 0.05 <= seconds[phase] <= slept + (wall - 4.2) + 0.05, (phase, seconds, wall)
    assert seconds["rest of the deploy"] >= 0.3 - 0.05, seconds
    assert 4.2 - 0.2 <= sum(seconds.values()) <= wall + 0.2, (seconds, wall)
    line = [x for x in out.stdout.splitlines() if x.startswith("Wall time by phase: ")]
    assert line == [specops_phases.summary(seconds)], out.stdout  # the file's figures, printed once
