"""n-gram speculation alone, deployed (issue 43): SmolLM2 with ``llama_server_spec_type: ngram-mod`` and no draft
model, through deploy.yml onto the lab host with the real llama-server. The deploy must pass its proof (drafted
tokens counted, /slots speculative), the unit must carry no draft model, and the host's models directory must hold
the target and nothing else. A draft named for ngram-mod is refused in the first play, before anything is built or
copied.

The proof's prompt is the role's default (``llama_server_probe_prompt``): a line repeated four times, whose
continuation repeats it. The earlier default ("Repeat this list exactly, one item per line: alpha, beta, ...") let a
draft model draft, but SmolLM2 answered it with prose and ngram-mod (a 24-token match) drafted nothing on a freshly
started server: measured on this machine with the pinned build, 0 drafted at 32, 64 and 128 tokens; with the
repeated line, 20 of 20 drafted tokens accepted at 32 tokens. This module uses the default, so an n-gram deploy with
default settings is what it proves.

Run with -s for the summary line.
"""

from __future__ import annotations

import json
import re

import pytest

from tests import lab
from tests.integration.test_deploy import PROFILE, UNIT, main_pid, speed_gate_record

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

MODELS_DIR = "/srv/specops-ngram"       # a directory of this module's own: the deploy puts only the target there
NO_DRAFT = {"llama_server_spec_type": "ngram-mod", "specops_models_draft": "", "specops_models_dir": MODELS_DIR,
            "llama_server_speed_gate": "off"}


def deploy(labhost, extra: dict) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                                "-e", f"@{PROFILE}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps(extra))


def test_a_draft_named_for_ngram_mod_is_refused_in_the_first_play(labhost):
    """The deploy profile names SmolLM2 as its own draft (specops_models_draft): with ngram-mod, which loads no draft
    model, llama-server would load it and never use it. Refused in one line naming the variable, in the first play."""
    run = deploy(labhost, {**NO_DRAFT, "specops_models_draft": "smollm2-135m"})
    assert run.rc != 0
    line = lab.refusal_line(run.text, "specops_models_draft='smollm2-135m': a draft model, but "
                                      "llama_server_spec_type='ngram-mod' loads none")
    assert 'set specops_models_draft: ""' in line
    assert "PLAY [Build llama.cpp" not in run.output and "Install the models" not in run.text, run.output[-3000:]
    print(f"\nREFUSED | {line}")


@pytest.fixture(scope="module")
def deployed(labhost, llama_build):
    labhost.run(["rm", "-rf", MODELS_DIR])
    run = deploy(labhost, NO_DRAFT)
    assert run.rc == 0, run.output[-6000:]
    return run


def test_ngram_mod_alone_deploys_and_passes_the_proof(deployed, labhost):
    m = re.search(r"answers and speculates: ([1-9]\d*) drafted, (\d+) accepted", deployed.text)
    assert m, deployed.text[-3000:]
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active" and main_pid(labhost) > 0
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    assert "--spec-type ngram-mod" in unit and "--spec-ngram-mod-n-max 4" in unit, unit
    assert "--spec-draft-model" not in unit and " -md " not in unit and "--model-draft" not in unit, unit
    assert f"--model {MODELS_DIR}/" in unit
    print(f"\nPROOF | ngram-mod, no draft model: {m.group(1)} drafted, {m.group(2)} accepted")


def test_no_draft_file_was_fetched_checked_or_installed(deployed, labhost):
    target = lab.model_path("smollm2-135m").name
    files = labhost.run(["find", MODELS_DIR, "-mindepth", "1", "-maxdepth", "1", "-type", "f", "-printf", "%f\\n"])
    assert files.stdout.split() == [target], files.stdout
    # the pair check (target against draft) never ran: there is no draft
    assert not re.search(r"TASK \[models : Run specops check-pair on the controller\] \**\s*(ok|changed):",
                         deployed.output), deployed.output[-3000:]
    baseline = labhost.run(["systemctl", "cat", "llama-server-baseline"]).stdout
    assert "--spec-draft-model" not in baseline and "--spec-type none" in baseline
    print(f"\nFILES | {MODELS_DIR}: {files.stdout.split()}")


def test_a_two_slot_service_is_judged_at_two_streams(deployed, labhost):
    """Issue 52: the speed gate judges at the service's concurrency. With llama_server_parallel 2 each pair of the
    probe is 2 requests at once on each server (aggregate tokens/s), the verdict line says "at 2 streams", the record
    keeps the streams, the figures per stream and the totals, and no one-stream break-even."""
    run = deploy(labhost, {**NO_DRAFT, "llama_server_parallel": 2, "llama_server_speed_gate": "warn"})
    assert run.rc == 0, run.output[-6000:]
    rec = speed_gate_record(labhost)
    assert rec["streams"] == 2 and "at 2 streams (2 requests at a time)" in run.text, (rec, run.text[-3000:])
    assert "--parallel 2" in labhost.run(["systemctl", "cat", UNIT]).stdout
    if rec["verdict"] in ("pays", "loses"):  # a starved host may leave it unproven: then no figures to check
        assert rec["speculative_total_tps"] == pytest.approx(2 * rec["speculative_tps"], rel=0.01), rec
        assert rec["break_even_acceptance"] is None and "pairs of 2 requests" in run.text
    print(f"\nAT N=2 | speed gate {rec['verdict']} {rec.get('ratio')} at {rec['streams']} streams")
