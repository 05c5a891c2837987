"""The deploy's auto-tune (issue 42, item 4) on the lab host with the real llama-server and llama-bench: deploy.yml
with ``llama_server_tune: auto`` runs ``specops tune`` on the host (specops shipped there by roles/specops_package),
prints its table, renders its choice into the unit (plain decoding as its answer keeps the kind the inventory set,
draft-simple here, for the speed gate), keeps its result in /etc/specops/tune.json and a summary in speed-gate.json;
the next deploy reuses the result without measuring; a result naming a draft length is rendered into the unit; an
explicit draft length wins and the tune does not run; with the kind left open (spec type auto), plain decoding as the
answer is what the unit serves, started once, with nothing for the speed gate to judge.

SmolLM2-135M drafts for itself here (as the suite's deploy profile): on a CPU that cannot pay, so the tune predicts
both lengths below plain decoding and measures nothing (its figures must still be there). The "a choice is rendered"
case plants a result in the host's record (the key untouched, so it is reused): a length that pays cannot be produced
on this CPU, and what is tested there is the deploy's side.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from specops.knobs import knob
from specops.tune import record
from tests import lab
from tests.integration.test_deploy import PROFILE, UNIT, main_pid

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

STATE = "/etc/specops"
TUNE = {"llama_server_tune": "auto", "llama_server_spec_type": "draft-simple", "llama_server_tune_lengths": [2, 4],
        "llama_server_tune_budget": 3, "llama_server_tune_max_tokens": 24, "llama_server_tune_probe_tokens": 24,
        "llama_server_tune_limit_per_workload": 2, "llama_server_speed_gate": "off"}


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    """The suite's deploy profile without its explicit draft length and its tune: off (an extra var would outrank
    whatever the tune chose, so the open settings must not be given at all)."""
    data = yaml.safe_load(PROFILE.read_text())
    for name in ("llama_server_draft_n_max", "llama_server_tune"):
        data.pop(name)
    path = tmp_path_factory.mktemp("tune-profile") / "profile.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def deploy(labhost, profile: Path, extra: dict) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(labhost.inventory),
                                "-e", f"@{profile}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps({**TUNE, **extra}))


def host_json(labhost, name: str) -> dict:
    return json.loads(labhost.run(["cat", f"{STATE}/{name}"]).stdout)


def unit_n_max(labhost) -> int:
    unit = labhost.run(["systemctl", "cat", UNIT]).stdout
    m = re.search(r"--spec-draft-n-max (\d+)", unit)
    assert m, unit
    return int(m.group(1))


@pytest.fixture(scope="module")
def tuned(labhost, llama_build, profile):
    labhost.run(["rm", "-rf", f"{STATE}/tune.json", f"{STATE}/tune-work"])
    run = deploy(labhost, profile, {})
    assert run.rc == 0, run.output[-6000:]
    return run


def test_the_deploy_tunes_on_the_host_and_renders_its_choice(tuned, labhost):
    res = host_json(labhost, "tune.json")
    assert {c["name"] for c in res["candidates"]} == {"exact-n2", "exact-n4"}, res["candidates"]
    assert all(c["predicted"] is not None for c in res["candidates"]), res["candidates"]
    assert res["key"] and res["facts"]["device"].startswith("cpu: ") and res["facts"]["build"]
    # the table and the choice, in the deploy's output
    assert "| exact-n2 |" in tuned.text and "| exact-n4 |" in tuned.text, tuned.text[-4000:]
    assert re.search(r"tune \([^)]*\): ", tuned.text), tuned.text[-4000:]
    chosen = res["chosen"]
    assert chosen in ("plain", "exact-n2", "exact-n4")
    # the kind is set here (draft-simple, only the length left open): plain decoding as the answer keeps it, at the
    # CPU's default length 2, for the speed gate to judge
    assert unit_n_max(labhost) == (2 if chosen == "plain" else int(chosen.removeprefix("exact-n")))
    if chosen == "plain":
        assert ("explicit settings win: llama_server_spec_type=draft-simple kept: the configured kind is deployed and "
                "the speed gate judges it") in tuned.text, tuned.text[-4000:]
    gate = host_json(labhost, "speed-gate.json")
    assert gate["tune"]["chosen"] == chosen and gate["tune"]["reused"] is False
    assert gate["tune"]["key"] == res["key"] and len(gate["tune"]["candidates"]) == 2
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    print(f"\nTUNED | chosen {chosen} in {res['elapsed_s']:.0f} s: "
          + ", ".join(f"{c['name']} predicted {c['predicted']:.2f}×" for c in res["candidates"]))


def test_the_next_deploy_reuses_the_result(tuned, labhost, profile):
    before = host_json(labhost, "tune.json")
    pid = main_pid(labhost)
    run = deploy(labhost, profile, {})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" in run.text, run.text[-4000:]
    assert re.search(r"TASK \[llama_server : Tune - run specops tune on the host[^\]]*\] \**\s*ok:", run.output)
    after = host_json(labhost, "tune.json")
    assert after["key"] == before["key"] and after["when"] == before["when"]
    assert main_pid(labhost) == pid  # nothing changed, nothing restarted
    assert host_json(labhost, "speed-gate.json")["tune"]["reused"] is True


def test_a_result_naming_a_length_is_rendered_into_the_unit(tuned, labhost, profile):
    res = host_json(labhost, "tune.json")
    res["chosen"] = "exact-n4"
    res["vars"] = {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 4}
    for c in res["candidates"]:
        if c["name"] == "exact-n4":
            c["measured"] = "1.30× [1.20, 1.40]"
    labhost.run(["sh", "-c", f"cat > {STATE}/tune.json"], input=json.dumps(res))
    run = deploy(labhost, profile, {})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" in run.text
    assert "exact-n4 (measured 1.30× [1.20, 1.40]): llama_server_draft_n_max=4" in run.text, run.text[-4000:]
    assert unit_n_max(labhost) == 4
    gate = host_json(labhost, "speed-gate.json")
    assert gate["tune"]["applied"] == {"llama_server_draft_n_max": 4} and gate["tune"]["draft_n_max"] == 4


def test_an_explicit_draft_length_wins_and_the_tune_does_not_run(tuned, labhost, profile):
    run = deploy(labhost, profile, {"llama_server_draft_n_max": 3})
    assert run.rc == 0, run.output[-6000:]
    assert ("tune: explicit settings win: llama_server_spec_type=draft-simple and llama_server_draft_n_max=3"
            in run.text), run.text[-4000:]
    assert unit_n_max(labhost) == 3
    assert "tune" not in host_json(labhost, "speed-gate.json")


def test_a_tune_beside_traffic_is_unproven_and_the_last_choice_stays(tuned, labhost, profile):
    """The service serves a client throughout: specops tune (forced by llama_server_tune_refresh) watches its /slots,
    sees the traffic and refuses to choose from those figures (exit 3); the host's record stays as it was and its
    choice (the planted exact-n4 above) is what the unit runs."""
    before = host_json(labhost, "tune.json")
    assert before["chosen"] == "exact-n4"  # left by test_a_result_naming_a_length_is_rendered_into_the_unit
    with lab.Stream(labhost, tokens=64) as stream:
        run = deploy(labhost, profile, {"llama_server_tune_refresh": True, "llama_server_speed_gate_idle_timeout": 5})
        served = len(stream.records)
    assert run.rc == 0, run.output[-6000:]
    assert "unproven: the service at http://127.0.0.1:8080" in run.text, run.text[-4000:]
    # (the YAML callback doubles the apostrophe of "host's" in a quoted message)
    assert "WARNING: the tune is unproven" in run.output and "last tuned choice stays" in run.text
    after = host_json(labhost, "tune.json")
    assert after["when"] == before["when"] and after["key"] == before["key"]
    assert unit_n_max(labhost) == 4
    assert host_json(labhost, "speed-gate.json")["tune"]["chosen"] == "exact-n4"
    print(f"\nBUSY | the client got {served} answers during the deploy; the tune was unproven, exact-n4 stays")


def test_a_plain_answer_with_the_kind_left_open_is_served_directly(tuned, labhost, profile):
    """llama_server_spec_type auto and the tune's answer plain decoding: the unit serves plain decoding (spec type
    none, no draft model), started once by this deploy (no speculative unit installed, measured by the speed gate and
    replaced), and the speed gate's record says it measured nothing because the tune's answer was plain. The result is
    planted as the host's record for the settings of spec type auto (its key recomputed: the tune's --ngram and
    --no-default differ), so the deploy reuses it: a plain answer is what this CPU gives, and the test is about the
    deploy's side."""
    res = host_json(labhost, "tune.json")
    res["facts"]["settings"] |= {"ngram": "auto", "no_default": False}  # what spec type auto passes specops tune
    res["key"] = record.key(res["facts"])
    res |= {"chosen": "plain", "runner_up": None, "vars": {"llama_server_spec_type": "none"},
            "reason": "no candidate beat plain decoding with a confident interval: planted"}
    labhost.run(["sh", "-c", f"cat > {STATE}/tune.json"], input=json.dumps(res))
    since = labhost.run(["date", "+%s"]).stdout.strip()
    pid = main_pid(labhost)
    run = deploy(labhost, profile, {"llama_server_spec_type": "auto", "llama_server_speed_gate": "fallback"})
    assert run.rc == 0, run.output[-6000:]
    assert "reused: the result of" in run.text, run.text[-4000:]
    assert ("no candidate pays here (no candidate beat plain decoding with a confident interval: planted): plain "
            "decoding is served (llama_server_spec_type=none); the speed gate has nothing to judge") in run.text
    assert "no speculation pays here" in run.text, run.text[-4000:]  # verify.yml: the tune's answer, not a proof
    assert "TASK [llama_server : Speed gate - judge" not in run.output  # the gate measured nothing
    argv = labhost.run(["systemctl", "show", "-p", "ExecStart", "--value", UNIT]).stdout
    assert "--spec-type none" in argv, argv
    assert not set(argv.split()) & set(knob("draft_model").flags), argv  # the draft model is not loaded
    # one start of the service by this deploy: the plain unit directly, no speculative detour and fallback
    journal = labhost.run(["journalctl", "-u", UNIT, "--since", f"@{since}", "--no-pager", "-o", "cat"]).stdout
    assert len([ln for ln in journal.splitlines() if ln.startswith("Started ")]) == 1, journal[-3000:]
    assert main_pid(labhost) != pid
    gate = host_json(labhost, "speed-gate.json")
    assert gate["verdict"] == "not_measured" and gate["serving"] == "plain" and gate["spec_type"] == "none", gate
    assert gate["message"].startswith("not measured: plain decoding is served, the tune's answer (specops tune, ")
    assert gate["tune"]["chosen"] == "plain" and gate["tune"]["applied"] == {"llama_server_spec_type": "none"}
    print(f"\nPLAIN | served directly: {gate['message']}")
