"""One phase alone on a live lab host (issue 41, item 4): after a full deploy, ``ansible-playbook deploy.yml --tags
llama_server_configure`` with a changed context size exits 0, and the host then runs the new setting, healthy and
answering. That tag alone runs what the phase needs (the inputs, the build's facts read on the builder, the models'
and the service's preflight, the deploy lock) and nothing else: no build, no copy of the build or the models, no
exporter or Prometheus. Run again with nothing changed, it changes nothing and restarts nothing.

Tags by role, and which task carries which: tests/unit/test_role_tags.py.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.test_deploy import UNIT, completion, deploy, main_pid

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

LOCK = "/run/specops/deploy.lock"
FIRST_CTX = 2048
NEW_CTX = 1536


def ctx_in_unit(labhost) -> int:
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    found = re.findall(r"--ctx-size (\d+)", unit)
    assert len(found) == 1, unit
    return int(found[0])


def running_cmdline(labhost) -> str:
    return labhost.run(["sh", "-c", f"tr '\\0' ' ' < /proc/{main_pid(labhost)}/cmdline"]).stdout


def lock_holder(labhost) -> str:
    return labhost.run(["cat", LOCK], check=False).stdout.strip()


def healthy(labhost) -> bool:
    return labhost.run(["python3", "-c", "import urllib.request;urllib.request.urlopen("
                        "'http://127.0.0.1:8080/health',timeout=2)"], check=False).returncode == 0


@pytest.fixture(scope="module")
def deployed(labhost, llama_build):
    # the whole deploy, every phase, at a known context size (the gate off: this module is about tags)
    run = deploy(labhost, "-e", "llama_server_speed_gate=off", "-e", f"llama_server_ctx_size={FIRST_CTX}")
    assert run.rc == 0, run.output[-6000:]
    assert ctx_in_unit(labhost) == FIRST_CTX
    return run


@pytest.fixture(scope="module")
def configured(deployed, labhost):
    pid = main_pid(labhost)
    run = deploy(labhost, "--tags", "llama_server_configure", "-e", "llama_server_speed_gate=off",
                 "-e", f"llama_server_ctx_size={NEW_CTX}")
    print(f"\nTAGS | --tags llama_server_configure, ctx {FIRST_CTX} → {NEW_CTX} | rc {run.rc} | "
          f"recap {run.recap(labhost.name)}")
    return run, pid


def test_configure_alone_applies_the_changed_setting(configured, labhost):
    run, pid = configured
    assert run.rc == 0, run.output[-6000:]
    assert run.recap(labhost.name).get("failed") == 0, run.output[-3000:]
    # the unit on the host and the process that runs now carry the new setting
    assert ctx_in_unit(labhost) == NEW_CTX
    assert labhost.show(UNIT, "NeedDaemonReload") == "no"
    assert main_pid(labhost) not in (0, pid)
    assert f"--ctx-size {NEW_CTX} " in running_cmdline(labhost) + " "
    # healthy afterwards: active, /health answers, a completion comes back
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    labhost.wait_for(lambda: healthy(labhost), timeout=120, what="/health")
    assert completion(labhost)["content"].strip()


def test_configure_alone_runs_only_what_that_phase_needs(configured, labhost):
    run, _ = configured
    text = run.text
    # what the configure phase reads: the inputs, the build (read on the builder), the models' and service's preflight
    for ran in ("Check every input against the argument specs", "Read llama-server --help",
                "Export the result for other roles", "Fetch and verify models on the controller",
                "Render and verify the units on the host before anything is installed",
                "Render the units into staging", "Take the deploy lock", "Release the deploy lock"):
        assert f"TASK [{ran}" in text or f": {ran}" in text, f"{ran!r} did not run:\n{text[-3000:]}"
    # ... and none of the other phases or roles: nothing built, no build or model copied, no exporter or Prometheus
    for left_out in ("Source, build and install", "Is the build installed on this host?", "Unpack the build",
                     "Install models on the host", "Install specops-exporter", "Install and configure Prometheus"):
        assert left_out not in text, f"{left_out!r} ran under --tags llama_server_configure"
    # the lock was taken and released: no run holds it now
    assert lock_holder(labhost) == "", lock_holder(labhost)


def test_configure_alone_again_changes_nothing(configured, labhost):
    pid = main_pid(labhost)
    run = deploy(labhost, "--tags", "llama_server_configure", "-e", "llama_server_speed_gate=off",
                 "-e", f"llama_server_ctx_size={NEW_CTX}")
    assert run.rc == 0, run.output[-6000:]
    assert run.recap(labhost.name).get("changed") == 0, run.output[-6000:]
    assert run.recap("localhost").get("changed") == 0, run.output[-6000:]
    assert main_pid(labhost) == pid and ctx_in_unit(labhost) == NEW_CTX
    assert lock_holder(labhost) == ""
