"""EAGLE-3 deployed (issue 43): SmolLM2-135M with the tiny EAGLE-3 draft made for it (tests/tiny_eagle3.py, cached in
``$SPECOPS_CACHE/models``) through deploy.yml onto the lab host with the real llama-server, ``llama_server_spec_type:
draft-eagle3``: the draft is fetched, checked and installed like any draft, the unit loads it with the EAGLE-3 type,
and the deploy's proof passes (drafted tokens counted; random weights: never accepted). The same draft under
draft-simple is refused in the first play, before anything is built or copied.

Run with -s for the summary line.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tests import lab, tiny_eagle3
from tests.integration.test_deploy import PROFILE, UNIT

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

MODELS_DIR = "/srv/specops-eagle3"
NAME = "tiny-eagle3"


def _vars(spec_type: str) -> dict:
    path = tiny_eagle3.cached(lab.model_path("smollm2-135m"))
    draft = {"name": NAME, "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
             "source": {"type": "file", "path": str(path)}}
    return {"specops_models": [{"catalog": "smollm2-135m"}, draft], "specops_models_target": "smollm2-135m",
            "specops_models_draft": NAME, "specops_models_dir": MODELS_DIR, "llama_server_spec_type": spec_type,
            "llama_server_draft_n_max": 3, "llama_server_speed_gate": "off"}


def deploy(labhost, extra: dict) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                                "-e", f"@{PROFILE}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps(extra))


def test_an_eagle3_draft_under_draft_simple_is_refused_in_the_first_play(labhost):
    run = deploy(labhost, _vars("draft-simple"))
    assert run.rc != 0
    line = lab.refusal_line(run.text, "is an EAGLE-3 model (architecture eagle3)")
    assert "Set llama_server_spec_type: draft-eagle3" in line
    assert "PLAY [Build llama.cpp" not in run.output, run.output[-3000:]
    print(f"\nREFUSED | {line}")


def test_eagle3_deploys_and_passes_the_proof(labhost, llama_build):
    labhost.run(["rm", "-rf", MODELS_DIR])
    run = deploy(labhost, _vars("draft-eagle3"))
    assert run.rc == 0, run.output[-6000:]
    m = re.search(r"answers and speculates: ([1-9]\d*) drafted, (\d+) accepted", run.text)
    assert m, run.text[-3000:]
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    draft = tiny_eagle3.cached(lab.model_path("smollm2-135m")).name
    assert "--spec-type draft-eagle3" in unit and f"{MODELS_DIR}/{draft}" in unit, unit
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    print(f"\nPROOF | draft-eagle3, SmolLM2 + tiny EAGLE-3: {m.group(1)} drafted, {m.group(2)} accepted")
