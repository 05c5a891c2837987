"""playbooks/soak.yml on the throwaway systemd host: the deployed unit (SmolLM2 profile) soaked by a transient
``specops-soak-<id>`` unit with kill -9, SIGSTOP/SIGCONT and ``systemctl restart`` faults; the report is fetched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import lab

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests" / "fixtures" / "deploy" / "smollm.yml"


@pytest.fixture(scope="module")
def deployed(labhost, llama_build):  # type: ignore[no-untyped-def]
    run = lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                               "-e", f"@{PROFILE}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                               "-e", "llama_server_speed_gate=off")  # the soak is not about the gate
    assert run.rc == 0, run.output[-6000:]
    return labhost


def test_soak_playbook_runs_a_transient_unit_with_faults_and_fetches_the_report(deployed, tmp_path: Path) -> None:
    labhost = deployed
    run_id = "systemd-itest"
    restarts_before = int(labhost.show("llama-server-speculative", "NRestarts"))
    run = lab.ansible_playbook(
        "playbooks/soak.yml", "-i", str(labhost.inventory), "-e", f"@{PROFILE}",
        "-e", json.dumps({"soak_duration": 45, "soak_faults": "kill9,stop:3,restart", "soak_fault_first": 5,
                          "soak_fault_interval": 8, "soak_max_tokens": 16, "soak_concurrency": 2,
                          "soak_run_id": run_id, "soak_fetch_dir": str(tmp_path), "soak_poll": 5,
                          "soak_args": ["--bucket", "20", "--reference-interval", "10", "--fault-tail", "0",
                                        "--fault-count", "3", "--min-tps-ratio", "0"]}),
    )
    md, data_path, png = (tmp_path / f"soak-{run_id}{ext}" for ext in (".md", ".json", ".png"))
    assert md.exists() and data_path.exists() and png.exists(), run.output[-6000:]
    data = json.loads(data_path.read_text())
    assert run.rc == 0, f"{data['failures']}\n{run.output[-4000:]}"
    assert data["verdict"] == "pass"
    s = data["summary"]
    assert s["lost"] == 0 and s["failed"] == 0 and s["issued"] == s["recorded"] > 0
    # --fault-count 3 is a promise: three faults ran (late if the host was slow), none is reported missing
    assert [f["kind"] for f in data["faults"]] == ["kill9", "stop", "restart"], data["faults_missed"]
    assert data["faults_missed"] == []
    assert all(f["error"] is None and f["time_to_recovery"] is not None for f in data["faults"])
    # systemd restarted the unit after kill -9 (NRestarts +1; `systemctl restart` then resets it to 0),
    # and both gave the server a new PID
    nrestarts = [v for _t, v in data["nrestarts"]]
    assert nrestarts == [restarts_before, restarts_before + 1, 0], data["nrestarts"]
    assert len({c["new"] for c in data["pid_changes"] if c["new"]}) == 3
    checks = {c["name"]: c["status"] for c in data["checks"]}
    assert checks["restarts"] == "pass" and checks["fault_recovery"] == "pass" and checks["fault_count"] == "pass"
    assert checks["acceptance"] != "fail"
    assert md.read_text().startswith(f"# Soak {run_id}: PASS")
    # the transient unit was released after the report was fetched
    state = labhost.run(["systemctl", "show", "-p", "LoadState", f"specops-soak-{run_id}.service"]).stdout
    assert "LoadState=not-found" in state
