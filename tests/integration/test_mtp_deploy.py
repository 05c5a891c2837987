"""MTP speculation deployed (issue 43): the target's own multi-token-prediction head drafts, no draft model.

No real MTP-headed GGUF reaches these machines: ``tests/tiny_mtp.py`` writes a tiny qwen35 model with one MTP layer
and random weights from the pinned llama.cpp's definitions (cached in ``$SPECOPS_CACHE/models``). Through deploy.yml
onto the lab host with the real llama-server: ``llama_server_spec_type: draft-mtp`` (the first play finds
``qwen35.nextn_predict_layers`` in the GGUF), and the comma list ``draft-mtp,ngram-mod``. Each must pass the deploy's
proof (drafted tokens counted by the server, /slots speculative); the unit carries no draft model and the host's
models directory holds the target alone. The head's weights are random, so it drafts and is never right: the proof
asks for drafting, not acceptance.

Run with -s for the summary lines.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tests import lab, tiny_mtp
from tests.integration.test_deploy import PROFILE, UNIT, main_pid

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

MODELS_DIR = "/srv/specops-mtp"  # a directory of this module's own: the deploy puts only the target there
NAME = "tiny-qwen35-mtp"


def _vars(spec_type: str) -> dict:
    path = tiny_mtp.cached()
    model = {"name": NAME, "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
             "source": {"type": "file", "path": str(path)}}
    return {"specops_models": [model], "specops_models_target": NAME, "specops_models_draft": "",
            "specops_models_dir": MODELS_DIR, "llama_server_spec_type": spec_type, "llama_server_draft_n_max": 3,
            "llama_server_speed_gate": "off"}


def deploy(labhost, extra: dict) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                                "-e", f"@{PROFILE}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps(extra))


def _proof(run: lab.PlaybookRun) -> tuple[int, int]:
    m = re.search(r"answers and speculates: ([1-9]\d*) drafted, (\d+) accepted", run.text)
    assert m, run.text[-3000:]
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("spec_type", ["draft-mtp", "draft-mtp,ngram-mod"])
def test_mtp_deploys_without_a_draft_model_and_passes_the_proof(labhost, llama_build, spec_type):
    labhost.run(["rm", "-rf", MODELS_DIR])
    run = deploy(labhost, _vars(spec_type))
    assert run.rc == 0, run.output[-6000:]
    drafted, accepted = _proof(run)
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active" and main_pid(labhost) > 0
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    assert f"--spec-type {spec_type}" in unit and "--spec-draft-n-max 3" in unit, unit
    assert "--spec-draft-model" not in unit and " -md " not in unit and "--model-draft" not in unit, unit
    assert f"--model {MODELS_DIR}/{tiny_mtp.NAME}" in unit, unit
    files = labhost.run(["find", MODELS_DIR, "-mindepth", "1", "-maxdepth", "1", "-type", "f", "-printf", "%f\\n"])
    assert files.stdout.split() == [tiny_mtp.NAME], files.stdout
    pid = main_pid(labhost)
    log = labhost.run(["journalctl", f"_PID={pid}", "--no-pager", "-o", "cat"]).stdout
    assert "creating MTP draft context against the target model" in log, log[-2000:]
    print(f"\nPROOF | {spec_type}, tiny qwen35 with one MTP layer, no draft model: {drafted} drafted, "
          f"{accepted} accepted")
