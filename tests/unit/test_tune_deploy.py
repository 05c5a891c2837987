"""The deploy's auto-tune, apart from any host: what it may choose from the role's settings (explicit settings win),
what of its result the deploy takes, the summary the speed gate's record keeps, and when a host's last result is
stale (specops.tune.deploy, specops.tune.record, the role's filters)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specops.bench.runner import Progress
from specops.commands import tune as tune_command
from specops.tune import deploy, record
from tests.unit.by_path import plugin_filters

_KNOBS = plugin_filters("specops")
_TUNE = plugin_filters("tune")
specops_knob_profile, specops_knob_vars = _KNOBS.specops_knob_profile, _KNOBS.specops_knob_vars
specops_tune_apply, specops_tune_scope = _TUNE.specops_tune_apply, _TUNE.specops_tune_scope
specops_tune_summary = _TUNE.specops_tune_summary

LENGTHS = [2, 4, 8, 12, 16]


def test_off_does_not_tune():
    s = deploy.scope("off", "auto", None, True, LENGTHS)
    assert not s.run and "llama_server_tune is off" in s.why


def test_everything_open_tunes_lengths_and_kinds():
    s = deploy.scope("auto", "auto", None, True, LENGTHS)
    assert s.run and s.draft and s.args == ("--lengths", "2,4,8,12,16")
    assert "draft length among 2,4,8,12,16" in s.why and "n-gram types" in s.why


def test_an_explicit_length_is_the_only_length_and_the_kind_stays_open():
    s = deploy.scope("auto", "auto", 6, True, LENGTHS)
    assert s.run and s.args == ("--lengths", "6") and "draft length 6 (set)" in s.why


def test_an_explicit_draft_simple_tunes_lengths_only():
    s = deploy.scope("auto", "draft-simple", None, True, LENGTHS)
    assert s.run and s.args == ("--lengths", "2,4,8,12,16", "--kinds", "draft")
    assert "n-gram" not in s.why


def test_no_draft_model_tunes_the_kinds_without_one():
    s = deploy.scope("auto", "auto", None, False, LENGTHS)  # the lengths: for the target's MTP head, where it has one
    assert s.run and not s.draft and s.args == ("--lengths", "2,4,8,12,16")


@pytest.mark.parametrize(("spec_type", "n_max", "words"), [
    ("draft-simple", 4, "explicit settings win: llama_server_spec_type=draft-simple and llama_server_draft_n_max=4"),
    ("ngram-mod", None, "explicit settings win: llama_server_spec_type=ngram-mod is set"),
    ("draft-mtp", 3, "explicit settings win: llama_server_spec_type=draft-mtp and llama_server_draft_n_max=3"),
])
def test_explicit_settings_win(spec_type, n_max, words):
    s = deploy.scope("auto", spec_type, n_max, True, LENGTHS)
    assert not s.run and words in s.why


def test_draft_simple_without_a_draft_has_nothing_to_tune():
    s = deploy.scope("auto", "draft-simple", None, False, LENGTHS)
    assert not s.run and "needs a draft model" in s.why


def _result(chosen: str, vars_: dict, measured: str | None = "1.21× [1.10, 1.30]") -> dict:
    return {"chosen": chosen, "reason": "r", "runner_up": "exact-n2", "when": "2026-11-27T06:00:00+0000",
            "vars": vars_, "key": "k", "facts": {"device": "cpu: X x2"}, "open": [],
            "candidates": [{"name": chosen, "predicted": 1.3, "measured": measured, "verdict": "chosen",
                            "measured_interval": {"estimate": 1.21, "low": 1.1, "high": 1.3, "n": 12}},
                           {"name": "exact-n2", "predicted": 1.1, "measured": "1.05× [1.01, 1.09]",
                            "verdict": "runner-up"}]}


def test_apply_sets_only_what_was_left_open():
    res = _result("exact-n8", {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 8})
    a = deploy.apply(res, "auto", None)
    assert a.vars == {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 8} and not a.kept
    assert "exact-n8 (measured 1.21× [1.10, 1.30])" in a.message
    # an explicit value is kept and said
    ng = _result("exact-ngram-mod", {"llama_server_spec_type": "ngram-mod", "llama_server_draft_n_max": 64})
    a = deploy.apply(ng, "auto", 4)
    assert a.vars == {"llama_server_spec_type": "ngram-mod"} and a.kept == {"llama_server_draft_n_max": 4}
    assert "explicit settings win: llama_server_draft_n_max=4 kept" in a.message


@pytest.mark.parametrize("n_max", [None, 4])
def test_apply_plain_with_the_kind_left_open_serves_plain_decoding(n_max):
    """Plain decoding as the answer (measured, or nothing predicted to pay) is what the unit serves: spec type none,
    no speculative profile installed for the speed gate to measure and replace (an explicit length changes nothing)."""
    a = deploy.apply(_result("plain", {"llama_server_spec_type": "none"}, None), "auto", n_max)
    assert a.vars == {"llama_server_spec_type": "none"} and not a.kept
    assert ("no candidate pays here (r): plain decoding is served (llama_server_spec_type=none); the speed gate has "
            "nothing to judge") in a.message
    # an older record naming no variables: plain is still spec type none
    assert deploy.apply(_result("plain", {}, None), "auto", None).vars == {"llama_server_spec_type": "none"}


def test_apply_plain_with_an_explicit_kind_keeps_it_for_the_speed_gate():
    """draft-simple set in the inventory, only the length left open: the configured kind stays and the gate judges
    it (the tune must not override what the inventory set)."""
    a = deploy.apply(_result("plain", {"llama_server_spec_type": "none"}, None), "draft-simple", None)
    assert a.vars == {} and a.kept == {"llama_server_spec_type": "draft-simple"}
    assert "explicit settings win: llama_server_spec_type=draft-simple kept" in a.message
    assert "the speed gate judges it" in a.message


def test_a_plain_answer_composes_a_profile_without_the_draft_model():
    """What profile.yml composes from the tune's plain answer: spec type none; the unit's draft model is chosen by
    specops_uses_draft_model, which loads none for it."""
    tuned = specops_tune_apply(_result("plain", {"llama_server_spec_type": "none"}, None), "auto", None)["vars"]
    names = specops_knob_vars(None)
    values = [None] * len(names)
    values[names.index("llama_server_spec_type")] = "auto"
    prof = specops_knob_profile(values, "cpu", tuned)
    assert prof["spec_type"] == "none"
    assert _KNOBS.specops_uses_draft_model("auto") and not _KNOBS.specops_uses_draft_model(prof["spec_type"])


def test_apply_refuses_a_record_without_a_choice():
    with pytest.raises(ValueError, match="names no choice"):
        deploy.apply({"vars": {}}, "auto", None)


def test_the_filters_and_the_summary():
    res = _result("exact-n8", {"llama_server_spec_type": "draft-simple", "llama_server_draft_n_max": 8})
    assert specops_tune_scope("auto", "auto", None, True, LENGTHS)["run"] is True
    applied = specops_tune_apply(json.dumps(res), "auto", None)
    summary = specops_tune_summary(res, applied, True)
    assert summary["chosen"] == "exact-n8" and summary["draft_n_max"] == 8 and summary["reused"] is True
    assert summary["speedup"]["estimate"] == 1.21 and summary["runner_up_measured"] == "1.05× [1.01, 1.09]"
    assert summary["device"] == "cpu: X x2" and summary["applied"] == applied["vars"]
    assert [c["name"] for c in summary["candidates"]] == ["exact-n8", "exact-n2"]


def test_the_knob_profile_takes_the_tunes_choice_over_the_role_values():
    names = specops_knob_vars(None)
    values = [None] * len(names)
    values[names.index("llama_server_spec_type")] = "auto"
    plain = specops_knob_profile(values, "cpu")
    assert plain["draft_n_max"] == 2  # the CPU default where the inventory left it open
    tuned = specops_knob_profile(values, "cpu", {"llama_server_draft_n_max": 8,
                                                 "llama_server_spec_type": "draft-simple"})
    assert tuned["draft_n_max"] == 8 and tuned["spec_type"] == "draft-simple"
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="no setting"):
        specops_knob_profile(values, "cpu", {"llama_server_bogus": 1})


def _args(tmp_path: Path, **kw) -> argparse.Namespace:
    target = tmp_path / "t.gguf"
    if not target.exists():
        target.write_bytes(b"x" * 10)
    base = {k: None for k in record.SETTINGS} | {"synth_rates": (), "tasks": None, "target": target, "draft": None,
                                                  "lengths": "2,4"}
    return argparse.Namespace(**(base | kw))


def test_the_key_moves_with_what_the_result_depends_on(tmp_path: Path):
    prefix = tmp_path / "llama"
    prefix.mkdir()
    (prefix / "build-info.json").write_text(json.dumps({"build_id": "b1", "backend": "cpu"}))
    first = record.facts(prefix, "cpu", _args(tmp_path))
    assert record.key(first) == record.key(record.facts(prefix, "cpu", _args(tmp_path)))
    assert record.changed(first, first) == []
    assert record.changed(first, record.facts(prefix, "cpu", _args(tmp_path, lengths="2,8"))) == ["setting lengths"]
    (prefix / "build-info.json").write_text(json.dumps({"build_id": "b2", "backend": "cpu"}))
    rebuilt = record.facts(prefix, "cpu", _args(tmp_path))
    assert record.changed(first, rebuilt) == ["build"] and record.key(first) != record.key(rebuilt)
    (tmp_path / "t.gguf").write_bytes(b"y" * 11)  # a new target file
    assert "target" in record.changed(first, record.facts(prefix, "cpu", _args(tmp_path)))
    assert first["device"].startswith("cpu: ")


def test_the_services_slots_are_in_the_key(tmp_path: Path):
    """Issue 51: with llama_server_parallel 4 a one-stream result was reused silently; another N tunes again and
    says "parallel changed"."""
    prefix = tmp_path / "llama"
    prefix.mkdir()
    (prefix / "build-info.json").write_text(json.dumps({"build_id": "b1", "backend": "cpu"}))
    one = record.facts(prefix, "cpu", _args(tmp_path, parallel=1))
    assert one["parallel"] == 1
    assert record.facts(prefix, "cpu", _args(tmp_path)) == one  # not given (no --parallel): 1
    assert record.facts(prefix, "cpu", _args(tmp_path, parallel=None)) == one
    four = record.facts(prefix, "cpu", _args(tmp_path, parallel=4))
    assert four["parallel"] == 4 and record.key(four) != record.key(one)
    assert record.changed(one, four) == ["parallel"] and record.changed(four, one) == ["parallel"]
    assert record.changed(four, record.facts(prefix, "cpu", _args(tmp_path, parallel=4))) == []
    # a result written before the fact: the slots it was tuned for are unknown, so it is tuned again, saying why
    older = {k: v for k, v in one.items() if k != "parallel"}
    assert record.changed(older, one) == ["parallel"] and record.key(older) != record.key(one)


def test_parallel_is_a_number_of_slots():
    p = argparse.ArgumentParser()
    p.add_argument("--parallel", type=record.parallel_arg, default=1)
    assert p.parse_args([]).parallel == 1 and p.parse_args(["--parallel", "4"]).parallel == 4
    for bad in ("0", "-1", "None", "four"):
        with pytest.raises(SystemExit):
            p.parse_args(["--parallel", bad])


def test_reuse_tunes_again_when_the_slots_changed(tmp_path: Path):
    """specops tune --reuse with another --parallel than its result's: not reused, "parallel changed" said and
    kept in retuned_because."""
    prefix = tmp_path / "llama"
    prefix.mkdir()
    (prefix / "build-info.json").write_text(json.dumps({"build_id": "b1", "backend": "cpu"}))
    one = record.facts(prefix, "cpu", _args(tmp_path, parallel=1))
    old = tmp_path / "tune.json"
    old.write_text(json.dumps({"chosen": "plain", "key": record.key(one), "facts": one, "when": "then"}))
    said = io.StringIO()
    s = SimpleNamespace(facts=record.facts(prefix, "cpu", _args(tmp_path, parallel=4)), progress=Progress(stream=said))
    assert tune_command._reused(s, argparse.Namespace(reuse=old, out=None)) == (False, ["parallel"])
    assert "(parallel changed): tuning again" in said.getvalue()


def test_previous_reads_only_a_tune_result(tmp_path: Path):
    p = tmp_path / "tune.json"
    assert record.previous(p) is None
    p.write_text("{not json")
    assert record.previous(p) is None
    p.write_text(json.dumps({"chosen": "plain"}))
    assert record.previous(p) is None  # no key: an older result, tuned again
    p.write_text(json.dumps({"chosen": "plain", "key": "abc"}))
    assert record.previous(p) == {"chosen": "plain", "key": "abc"}


def test_an_undecided_tune_serves_plain_decoding_and_says_undecided():
    from specops.tune.deploy import apply
    res = {"chosen": "plain", "when": "now", "settled": False,
           "reason": "undecided: the intervals reach both sides of plain decoding", "vars": {}}
    got = apply(res, "auto", None)
    assert got.vars == {"llama_server_spec_type": "none"}
    assert "the tune is undecided" in got.message and "until a longer tune settles it" in got.message


def test_the_deploys_line_gives_the_minutes_used_and_what_would_settle_an_undecided_tune():
    """Issue 61 item 3: the line says the minutes the tune used of its budget; undecided, how many more minutes
    would settle it with the variable to set, said first when under 10% more."""
    decided = {**_result("exact-ngram-mod", {"llama_server_spec_type": "ngram-mod"}, "1.12×"),
               "elapsed_s": 372.0, "budget_s": 900.0}
    assert deploy.apply(decided, "auto", None).message.startswith("tune (2026-11-27T06:00:00+0000, 6.2 of 15 min): ")
    undecided = {**_result("plain", {"llama_server_spec_type": "none"}, None), "settled": False,
                 "elapsed_s": 875.0, "budget_s": 900.0, "to_settle_min": 1.2}
    line = deploy.apply(undecided, "auto", None).message
    assert "14.6 of 15 min): less than 10% more budget would settle it: about 1 more minute(s) of measuring would " \
           "settle it: set llama_server_tune_budget: 17. " in line, line
    assert "the tune is undecided" in line
    far = {**undecided, "to_settle_min": 9.0}
    line = deploy.apply(far, "auto", None).message
    assert "less than 10%" not in line and "set llama_server_tune_budget: 25" in line, line
    settled = {**undecided, "settled": True}
    assert "llama_server_tune_budget" not in deploy.apply(settled, "auto", None).message
    short = {**undecided, "to_settle_min": 40.0, "to_settle_tasks": [156, 24]}
    line = deploy.apply(short, "auto", None).message
    assert "about 156 tasks would settle it and the task set holds 24: give it more of your traffic" in line, line
    assert "llama_server_tune_budget" not in line


def test_the_deploys_line_says_what_identity_found_and_every_difference():
    """Issue 78 item 1: the deploy's line gives per measured candidate the answers checked and the bound the count
    allows, and each difference from plain decoding explained; the speed gate's record keeps the identity section."""
    tie = ("edit-06: at token 72 wrote \" '\" where plain decoding wrote ' t'; plain decoding's log-probabilities "
           "-0.692 and -0.847, 0.155 nats apart, within the host's batch spread 0.696: near-tie")
    res = _result("exact-ngram-mod", {"llama_server_spec_type": "ngram-mod"})
    res["identity"] = {"rule": "equivalent", "spread": {"nats": 0.0},
                       "candidates": {"exact-ngram-mod": {"checked": 24, "bound": "0 of 24 answers (changes or "
                                                          "unexplained): fewer than 12% at 95%; 1 near-tie(s) allowed",
                                                          "differences": [tie]}}}
    a = deploy.apply(res, "auto", None)
    assert a.message.endswith(
        ". Output against plain decoding (rule equivalent): exact-ngram-mod: 0 of 24 answers (changes or unexplained): "
        "fewer than 12% at 95%; 1 near-tie(s) allowed. Differences: exact-ngram-mod on " + tie)
    assert deploy.summary(res, a, reused=False)["identity"] == res["identity"]
    # a record from before the check: the line is what it was
    assert "Output against plain decoding" not in deploy.apply(_result("exact-ngram-mod", {}), "auto", None).message
