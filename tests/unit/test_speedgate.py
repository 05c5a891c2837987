"""The deploy's speed gate: judging the host's probes, the break-even, side by side or one after the other,
and the exporter's reading of the record it leaves."""

from __future__ import annotations

import json

import pytest

from specops.exporter.speedgate import SpeedGateFile, parse
from specops.speedgate import (
    ONE_AFTER_THE_OTHER,
    SIDE_BY_SIDE,
    SpeedGateError,
    break_even,
    judge,
    measured_at,
    message,
    mode_from_fit,
)

SPEC, PLAIN = "http://127.0.0.1:8080", "http://127.0.0.1:8081"


def probe(rates: dict[str, list[float]], draft: tuple[int, int] = (0, 0), n: int = 128) -> dict:
    reqs = []
    for url, vals in rates.items():
        for i, v in enumerate(vals):
            d = draft if url == SPEC else (0, 0)
            reqs.append({"url": url, "prompt": i, "predicted_per_second": v, "predicted_n": n,
                         "draft_n": d[0], "draft_n_accepted": d[1]})
    return {"requests": reqs}


def test_speculation_that_loses_is_judged_so_with_both_figures() -> None:
    p = probe({SPEC: [6.0, 6.6, 5.4, 6.0], PLAIN: [12.0, 12.0, 12.0, 12.0]}, draft=(80, 60))
    r = judge(p, p, SPEC, PLAIN, draft_n_max=2)
    assert r["verdict"] == "loses" and r["prompts"] == 4
    assert r["ratio"] == pytest.approx(0.5, abs=0.01) and r["ratio_low"] < r["ratio"] < r["ratio_high"] < 1
    assert r["speculative_tps"] == pytest.approx(6.0) and r["plain_tps"] == pytest.approx(12.0)
    assert r["acceptance"] == pytest.approx(0.75)
    # the record names its reference: the unit's own plain decoding (issue 50), never llama.cpp's defaults
    assert r["reference"].startswith("the unit's own plain decoding") and "spec_type none" in r["reference"]
    line = message(r, "fallback", "llama-server-speculative")
    assert line.startswith("speculative 6.0 tok/s vs plain 12.0 tok/s (0.50× [")
    assert "SPECULATION LOSES" in line and "now serves plain decoding" in line and "specops bench" in line
    assert "kept as configured" in message(r, "warn", "svc")
    assert "llama_server_speed_gate=fail" in message(r, "fail", "svc")


def test_speculation_that_pays_is_kept_and_min_ratio_raises_the_bar() -> None:
    p = probe({SPEC: [18.0, 19.0, 17.0], PLAIN: [12.0, 12.5, 11.5]})
    r = judge(p, p, SPEC, PLAIN)
    assert r["verdict"] == "pays" and "keeps it" in message(r, "fallback", "svc")
    assert judge(p, p, SPEC, PLAIN, min_ratio=1.6)["verdict"] == "loses"


def test_a_pass_for_a_service_with_several_slots_says_it_was_measured_one_request_at_a_time() -> None:
    p = probe({SPEC: [18.0, 19.0, 17.0], PLAIN: [12.0, 12.5, 11.5]})
    r = judge(p, p, SPEC, PLAIN)
    assert "--parallel" not in message(r, "fallback", "svc", parallel=1)
    line = message(r, "fallback", "svc", parallel=4)
    assert "keeps it" in line and "--parallel 4" in line and "specops saturate" in line
    assert line.count("one request at a time") == 1  # said once, in the head, not again in the note


AT_ONE = "at 1 stream (one request at a time)"


@pytest.mark.parametrize("rates, verdict", [
    ({SPEC: [18.0, 19.0, 17.0], PLAIN: [12.0, 12.5, 11.5]}, "pays"),
    ({SPEC: [6.0, 6.6, 5.4, 6.0], PLAIN: [12.0, 12.0, 12.0, 12.0]}, "loses"),
    ({SPEC: [16.0, 17.0, 16.5, 16.4], PLAIN: [1.2, 9.0, 2.5, 5.0]}, "unproven"),  # too wide
    ({SPEC: [6.0], PLAIN: [12.0]}, "unproven"),  # one prompt: no ratio in the head
])
@pytest.mark.parametrize("action", ["fallback", "warn", "fail"])
@pytest.mark.parametrize("parallel", [None, 1, 4])
def test_every_verdict_line_says_the_concurrency_it_measured_at(rates: dict, verdict: str, action: str,
                                                               parallel: int | None) -> None:
    """Issue 51: the losing line said nothing of concurrency, only the winning one (and only for --parallel > 1)."""
    p = probe(rates)
    r = judge(p, p, SPEC, PLAIN)
    assert r["verdict"] == verdict and r["streams"] == 1 and r["concurrency"] == AT_ONE == measured_at()
    line = message(r, action, "svc", parallel=parallel)
    assert f"{AT_ONE}: " in line, line  # right before the verdict, the same words whatever it is
    assert line.count("one request at a time") == 1, line


def test_the_concurrency_is_said_as_measured() -> None:
    assert measured_at(1) == AT_ONE
    assert measured_at(4) == "at 4 streams (4 requests at a time)"
    p = probe({SPEC: [6.0, 6.6, 5.4, 6.0], PLAIN: [12.0, 12.0, 12.0, 12.0]})
    line = message({**judge(p, p, SPEC, PLAIN), "streams": 4}, "fallback", "svc")
    assert "at 4 streams (4 requests at a time): SPECULATION LOSES" in line


def test_one_after_the_other_judges_two_runs() -> None:
    spec = probe({SPEC: [10.0, 10.0]})
    plain = probe({PLAIN: [12.5, 12.5]})
    r = judge(spec, plain, SPEC, PLAIN, mode=ONE_AFTER_THE_OTHER)
    assert r["ratio"] == pytest.approx(0.8) and r["mode"] == ONE_AFTER_THE_OTHER


def test_probes_without_common_answers_are_an_error() -> None:
    with pytest.raises(SpeedGateError, match="no prompt answered by both"):
        judge(probe({SPEC: [10.0]}), probe({PLAIN: []}), SPEC, PLAIN)
    bad = probe({SPEC: [float("nan"), 0.0], PLAIN: [10.0, 10.0]})
    with pytest.raises(SpeedGateError):
        judge(bad, bad, SPEC, PLAIN)


def test_break_even_from_the_measured_round_cost() -> None:
    # 128 tokens, 96 accepted of 128 drafted with n_max 4: 32 rounds, 4 tokens per round. At 0.5× of plain a
    # round costs 8 plain steps: it would need 7 tokens a round, i.e. 7/4 accepted per drafted token: impossible.
    assert break_even(128, 128, 96, 0.5, 4) == pytest.approx(1.75)
    # the same round at 2× costs 2 steps: one accepted of four drafted breaks even
    assert break_even(128, 128, 96, 2.0, 4) == pytest.approx(0.25)
    assert break_even(128, 0, 0, 1.0, 4) is None and break_even(128, 10, 5, 1.0, None) is None


def test_side_by_side_only_with_room_for_a_plain_server_beside() -> None:
    fit = {"needed_mib": 2000, "margin_mib": 512, "available_mib": 6000, "breakdown": [
        {"component": "target weights", "mib": 1000}, {"component": "target KV cache", "mib": 100},
        {"component": "target compute", "mib": 70}, {"component": "draft weights", "mib": 500},
        {"component": "runtime overhead", "mib": 128}, {"component": "prompt cache", "mib": 1024}]}
    assert mode_from_fit(fit) == SIDE_BY_SIDE  # 2000 + 512 + 2322 <= 6000
    assert mode_from_fit({**fit, "available_mib": 4000}) == ONE_AFTER_THE_OTHER
    assert mode_from_fit(None) == ONE_AFTER_THE_OTHER and mode_from_fit({"error": "x"}) == ONE_AFTER_THE_OTHER
    # RPC devices serve one client at a time: room or not, the plain server waits for the service to let go
    rpc = {**fit, "placement": {"devices": ["RPC0", "RPC1"], "draft_devices": ["RPC1"]}}
    assert mode_from_fit(rpc) == ONE_AFTER_THE_OTHER
    assert mode_from_fit({**fit, "placement": {"devices": ["CUDA0", "CUDA1"], "draft_devices": ["CUDA0"]}}) \
        == SIDE_BY_SIDE


def record(**kw: object) -> dict:
    base = {"plain_tps": 15.0, "speculative_tps": 9.0, "ratio": 0.6, "break_even_acceptance": 1.3,
            "verdict": "loses", "action": "fallback", "serving": "plain", "spec_type": "draft-simple",
            "mode": "side by side", "measured_at": "2026-11-23T14:00:00Z", "build_id": "x"}
    return {**base, **kw}


def test_exporter_reads_a_record_and_refuses_a_bad_one() -> None:
    g = parse(record())
    assert g is not None and g.numbers["plain_tps"] == 15.0 and g.labels["serving"] == "plain"
    for bad in (record(plain_tps=float("nan")), record(plain_tps=-1), record(ratio="fast"), record(verdict="?"),
                record(speculative_tps=None), [], "x", None):
        assert parse(bad) is None, bad


def test_an_interval_wider_than_the_bound_is_unproven_not_a_verdict() -> None:
    # the live-host report: 4.68× [1.51–14.50] measured while a client streamed on the service
    p = probe({SPEC: [16.0, 17.0, 16.5, 16.4], PLAIN: [1.2, 9.0, 2.5, 5.0]})
    r = judge(p, p, SPEC, PLAIN)
    assert r["verdict"] == "unproven" and "too wide" in r["unproven_because"]
    assert "llama_server_speed_gate_max_spread" in r["unproven_because"]
    line = message(r, "fallback", "svc")
    assert "UNPROVEN" in line and "keeps the configuration already proven" in line
    assert "kept as configured" in message(r, "warn", "svc") and "deploy fails" in message(r, "fail", "svc")
    assert judge(p, p, SPEC, PLAIN, max_spread=100)["verdict"] == "pays"


def test_too_few_clean_prompts_or_blind_slots_are_unproven() -> None:
    p = probe({SPEC: [6.0], PLAIN: [12.0]})
    p["contended"] = [{"prompt": 1, "attempt": 0, "other_requests": {SPEC: 1}}]
    p["gave_up"] = "the servers were not idle of other requests within 120 s (prompt 2 of 4)"
    r = judge(p, p, SPEC, PLAIN)
    assert r["verdict"] == "unproven" and r["prompts"] == 1 and r["contended"] == 1
    assert "not idle" in r["unproven_because"]
    assert "1 discarded: other requests ran" in message(r, "fallback", "svc")
    q = probe({SPEC: [6.0, 6.1, 5.9], PLAIN: [12.0, 12.1, 11.9]})
    q["slots_unavailable"] = True
    assert judge(q, q, SPEC, PLAIN)["verdict"] == "unproven"


def test_idle_verdicts_stand_on_narrow_intervals() -> None:
    p = probe({SPEC: [6.0, 6.3, 5.8, 6.1], PLAIN: [12.0, 12.2, 11.9, 12.1]})
    r = judge(p, p, SPEC, PLAIN)
    assert r["verdict"] == "loses" and r["ratio_high"] / r["ratio_low"] < 1.5


def test_the_exporter_publishes_nothing_from_an_unproven_record_and_says_why(tmp_path, caplog) -> None:
    p = probe({SPEC: [16.0, 17.0, 16.5, 16.4], PLAIN: [1.2, 9.0, 2.5, 5.0]})
    record = judge(p, p, SPEC, PLAIN)
    assert record["verdict"] == "unproven" and record["plain_tps"] > 0
    path = tmp_path / "speed-gate.json"
    path.write_text(json.dumps(record))
    assert parse(record) is None
    with caplog.at_level("INFO"):
        assert SpeedGateFile(str(path)).read() is None
    assert "unproven" in caplog.text and "not a valid record" not in caplog.text


SATURATION = {"run_id": "20261124T225124Z", "levels": [
    {"level": 1, "block_ratios": [0.57, 0.6], "ratio_geomean": 0.58},
    {"level": 2, "block_ratios": [0.58, 0.6], "ratio_geomean": 0.59},
    {"level": 4, "block_ratios": [0.9, 1.1], "ratio_geomean": 1.0}]}


def test_a_pass_for_several_slots_quotes_the_hosts_saturation_run_at_that_n() -> None:
    p = probe({SPEC: [18.0, 19.0, 17.0], PLAIN: [12.0, 12.5, 11.5]})
    r = judge(p, p, SPEC, PLAIN)
    line = message(r, "fallback", "svc", parallel=2, saturation=SATURATION)
    assert "keeps it" in line and "saturation run 20261124T225124Z: at N=2 speculation LOSES (0.59×" in line
    assert "neither pays nor loses" in message(r, "fallback", "svc", parallel=4, saturation=SATURATION)
    assert "did not measure N=3 (N=1, N=2, N=4)" in message(r, "fallback", "svc", parallel=3, saturation=SATURATION)
    assert "saturation" not in message(r, "fallback", "svc", parallel=1, saturation=SATURATION)
    assert "llama_server_saturation_report" in message(r, "fallback", "svc", parallel=2)


def test_the_bench_header_uses_the_saturation_run_beside_its_report(tmp_path) -> None:
    from specops.bench.inventory import header_for, latest_saturation

    assert latest_saturation(tmp_path) is None
    assert "run `specops saturate`" in header_for("spec-n4", "why", "rule", "r.md", None)
    (tmp_path / "saturation-20261101T000000Z.json").write_text(json.dumps({**SATURATION, "run_id": "old"}))
    (tmp_path / "saturation-20261124T225124Z.json").write_text(json.dumps(SATURATION))
    (tmp_path / "saturation-20261125T000000Z.json").write_text("{not json")
    found = latest_saturation(tmp_path)
    assert found and found[1]["run_id"] == "20261124T225124Z"
    head = header_for("spec-n4", "why", "rule", "r.md", found)
    assert "saturation-20261124T225124Z.json" in head and "llama_server_saturation_report" in head
    assert "Mixed or unsettled" in head


# ---- the deploy's decisions: roles/llama_server_speed_gate/tasks/decide.yml, main.yml, verdict.yml, record.yml

PROMPTS = ["Write a parser.", "Explain hash maps — in \"three\" paragraphs."]
SHA, OTHER = "a" * 64, "b" * 64


def _read(record: dict | None) -> dict:
    return {"record": record or {}, "problem": ""}


def test_the_prompts_key_is_the_one_the_role_computed_with_to_json_and_hash() -> None:
    from ansible.plugins.filter.core import get_hash, to_json

    from specops.speedgate import prompts_traffic

    assert prompts_traffic(PROMPTS) == f"prompts sha256 {get_hash(to_json(PROMPTS), 'sha256')[:16]}"


def test_before_install_measures_each_unit_once_and_serves_plain_after_a_loss() -> None:
    from specops.speedgate import before_install, prompts_traffic

    key = prompts_traffic(PROMPTS)
    fresh = before_install(_read(None), SHA, "fallback", "draft-simple", False, PROMPTS)
    assert fresh["measure"] and not fresh["lost_before"] and not fresh["plain_only"] and fresh["traffic"] == key
    assert fresh["plain_note"] == fresh["refusal"] == "" and fresh["on_tasks"] is False
    lost = {"verdict": "loses", "unit_sha256": SHA, "traffic": key, "measured_at": "T", "message": "it lost.",
            "speculative_tps": 6.0, "plain_tps": 12.0, "ratio": 0.5, "concurrency": "at 1 stream"}
    again = before_install(_read(lost), SHA, "fallback", "draft-simple", False, PROMPTS)
    assert not again["measure"] and again["lost_before"] and again["plain_only"] and again["refusal"] == ""
    assert again["plain_note"] == "speed gate (T): it lost. Set llama_server_speed_gate_refresh=true to measure again."
    refused = before_install(_read(lost), SHA, "fail", "draft-simple", False, PROMPTS)
    assert not refused["plain_only"] and refused["refusal"].startswith(
        "speed gate (T): this unit LOST on this host (speculative 6.0 tok/s vs plain 12.0 tok/s, 0.5×, measured at 1 "
        "stream); not deployed (llama_server_speed_gate=fail), nothing was changed. Set ")
    kept = before_install(_read(lost), SHA, "warn", "draft-simple", False, PROMPTS)
    assert kept["lost_before"] and not kept["plain_only"] and not kept["measure"] and kept["refusal"] == ""
    # measured again: refreshed, another unit, an unproven verdict, other traffic; never with the gate off or no spec
    assert before_install(_read(lost), SHA, "fallback", "draft-simple", True, PROMPTS)["measure"]
    assert before_install(_read(lost), OTHER, "fallback", "draft-simple", False, PROMPTS)["measure"]
    assert before_install(_read({**lost, "verdict": "unproven"}), SHA, "fallback", "x", False, PROMPTS)["measure"]
    assert before_install(_read({**lost, "traffic": "tasks a.jsonl"}), SHA, "fallback", "x", False, PROMPTS)["measure"]
    assert not before_install(_read(None), SHA, "off", "draft-simple", False, PROMPTS)["measure"]
    assert not before_install(_read(lost), SHA, "fallback", "none", False, PROMPTS)["lost_before"]
    # a record from before the traffic was kept is one on the prompts
    old = {k: v for k, v in lost.items() if k != "traffic"}
    assert before_install(_read(old), SHA, "fallback", "draft-simple", False, PROMPTS)["plain_only"]


def test_before_install_times_the_team_s_tasks_only_when_the_tune_ran_on_them(tmp_path) -> None:
    from specops.speedgate import before_install, prompts_traffic

    tasks = tmp_path / "team.jsonl"
    tasks.write_text('{"prompt": "x"}\n')
    on = before_install(_read(None), SHA, "fallback", "draft-simple", False, PROMPTS, [str(tasks)], True)
    assert on["on_tasks"] and on["traffic"].startswith("tasks team.jsonl (sha256 ")
    off = before_install(_read(None), SHA, "fallback", "draft-simple", False, PROMPTS, [str(tasks)], False)
    assert not off["on_tasks"] and off["traffic"] == prompts_traffic(PROMPTS)


def test_after_verdict_records_what_the_service_serves_and_what_the_deploy_does() -> None:
    from specops.speedgate import after_verdict

    plan = {"prev": {"verdict": "pays", "unit_sha256": OTHER}, "traffic": "prompts sha256 x"}
    result = {"verdict": "unproven", "message": "m"}

    def then(verdict: str, action: str, known_good: str | None = OTHER) -> dict:
        return after_verdict({**result, "verdict": verdict}, action, plan, known_good, SHA, "draft-simple", "b1",
                             measured_at="T")

    kept = then("unproven", "fallback")
    assert kept["keep_known_good"] and kept["to_known_good"] and not kept["to_plain"] and not kept["fail"]
    assert kept["serving"] == "known-good"
    assert kept["record"] == {"verdict": "unproven", "message": "m", "unit_sha256": SHA, "measured_at": "T",
                              "action": "fallback", "spec_type": "draft-simple", "build_id": "b1",
                              "traffic": "prompts sha256 x", "serving": "known-good"}
    none_proven = then("unproven", "fallback", None)
    assert none_proven["to_plain"] and not none_proven["to_known_good"] and none_proven["serving"] == "plain"
    assert then("unproven", "fallback", SHA)["to_plain"]  # the known-good unit is not the one that paid
    loses = then("loses", "fallback")
    assert loses["to_plain"] and not loses["keep_known_good"] and loses["serving"] == "plain"
    assert then("pays", "fallback")["serving"] == "speculative" and not then("pays", "fallback")["to_plain"]
    assert then("loses", "warn")["serving"] == "speculative" and not then("loses", "warn")["to_plain"]
    failed = then("loses", "fail")
    assert failed["fail"] and failed["serving"] == "not deployed" and not failed["to_plain"]
    assert then("unproven", "fail")["fail"] and not then("pays", "fail")["fail"]
    assert then("unproven", "warn")["keep_known_good"] and not then("unproven", "warn")["to_known_good"]


def test_the_record_for_the_unit_that_runs_now() -> None:
    import base64

    from specops.speedgate import running_record

    unit = {"unit_file": "/etc/systemd/system/s.service", "installed_unit_sha256": OTHER}

    def record(measured, plan, action="fallback", spec="draft-simple", summary=None, tune_plain=False) -> dict:
        return running_record(measured, plan, action, SHA, spec, "b1", unit["unit_file"],
                              unit["installed_unit_sha256"], "/etc/specops/speed-gate.json", summary, tune_plain)

    this_run = {"verdict": "pays", "unit_sha256": SHA, "ratio": 1.3}
    slurped = {"content": base64.b64encode(json.dumps(this_run).encode()).decode()}
    assert record(slurped, {"measure": True, "prev": {}}) == {**this_run, **unit}
    assert record({"failed": True}, {"measure": True, "prev": {}}) == unit  # unreadable: no verdict kept
    prev = {"verdict": "loses", "unit_sha256": SHA, "serving": "speculative", "action": "warn", "ratio": 0.5}
    assert record({}, {"measure": False, "prev": prev, "plain_only": True}) == {
        **prev, "serving": "plain", "action": "fallback", **unit}
    assert record({}, {"measure": False, "prev": prev}, "off") == {
        "verdict": "not_measured", "unit_sha256": SHA, "action": "off", "serving": "speculative",
        "spec_type": "draft-simple", "build_id": "b1", "message": "not measured: llama_server_speed_gate is off",
        **unit}
    other = {**prev, "unit_sha256": OTHER}  # never an earlier unit's verdict
    assert record({}, {"measure": False, "prev": other}, spec="none")["message"] == (
        "not measured: the service does not speculate")
    tuned = record({}, {"measure": False, "prev": {}}, spec="none", summary={"when": "W", "reason": ""},
                   tune_plain=True)
    assert tuned["message"] == ("not measured: plain decoding is served, the tune's answer (specops tune, W: no "
                                "candidate pays here)") and tuned["tune"] == {"when": "W", "reason": ""}
    assert tuned["serving"] == "plain" and "tune" not in record({}, {"measure": False, "prev": {}})


@pytest.mark.parametrize("spec, verdict", [
    ([15.0, 15.6, 14.4, 15.0], "pays"),  # 1.25x, confidently above 1 + 5%
    ([12.3, 12.4, 12.2, 12.3], "loses"),  # 1.025x, confidently faster but wholly under 1 + 5%: no gain worth serving
    ([11.9, 13.1, 12.2, 12.8], "unproven"),  # ~1.04x, the interval reaches both sides of plain decoding
    ([9.0, 9.6, 8.4, 9.0], "loses"),  # 0.75x, slower
])
def test_at_n_streams_the_gate_holds_the_service_to_the_tunes_rule(spec: list[float], verdict: str) -> None:
    """Issue 62 item 2: at N streams the gate's verdict is the tune's rule at N, the margin included; at one stream
    the operator's min_ratio on the estimate, as before (1.025x pays there)."""
    p = {**probe({SPEC: spec, PLAIN: [12.0, 12.0, 12.0, 12.0]}), "streams": 2}
    r = judge(p, p, SPEC, PLAIN)
    assert r["verdict"] == verdict, r
    if verdict == "unproven":
        assert "1 + 5% (the tune's rule at N)" in r["unproven_because"]
        assert "reaches both sides" in r["unproven_because"]
    one = judge(probe({SPEC: spec, PLAIN: [12.0, 12.0, 12.0, 12.0]}), probe({SPEC: spec, PLAIN: [12.0] * 4}), SPEC,
                PLAIN)
    assert one["verdict"] == ("pays" if sum(spec) / 4 >= 12.0 else "loses")
