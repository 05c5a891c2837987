"""Exporter parsers against real llama-server captures (tests/fixtures/llama-server-0c1e57098)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.exporter.gpu import MIB, parse_compute_apps
from specops.exporter.llama_metrics import parse_server_metrics
from specops.exporter.logline import LogAcceptance, parse_acceptance_line
from specops.exporter.process import parse_launch, parse_systemctl_show
from specops.exporter.props import parse_props
from specops.exporter.slots import ShapeError, summarize_slots

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CAP = FIX / "llama-server-0c1e57098"


def test_spec_metrics_capture():
    m = parse_server_metrics((CAP / "spec_metrics_after_bench.txt").read_text())
    assert m.bad_lines == 0 and m.invalid_values == 0
    assert m.has_spec_counters
    assert m.counters["llamacpp_spec_draft_tokens_total"] == 862
    assert m.counters["llamacpp_spec_accepted_tokens_total"] == 835
    assert m.counters["llamacpp_spec_drafts_total"] == 108
    assert m.counters["llamacpp_tokens_predicted_total"] == 957
    assert m.gauges["llamacpp_tokens_max"] == 147  # typed counter by the server, exported as a gauge
    assert m.accepted_per_pos == {0: 108, 1: 105, 2: 104, 3: 104, 4: 104, 5: 104, 6: 104, 7: 102}
    # the reset-on-read throughput gauges are not re-exposed
    assert not any("tokens_seconds" in k for k in (*m.counters, *m.gauges))


def test_baseline_metrics_capture_has_zero_spec_counters():
    m = parse_server_metrics((CAP / "base_metrics.txt").read_text())
    assert m.has_spec_counters and m.counters["llamacpp_spec_drafts_total"] == 0
    assert not m.accepted_per_pos


def test_old_build_without_spec_counters():
    lines = (CAP / "base_metrics.txt").read_text().splitlines()
    text = "\n".join(line for line in lines if "spec_decode" not in line)
    m = parse_server_metrics(text)
    assert not m.has_spec_counters and m.counters["llamacpp_tokens_predicted_total"] == 189


def test_truncated_body_keeps_the_good_lines():
    text = (CAP / "spec_metrics_after_bench.txt").read_text()
    cut = text[: text.index("llamacpp:n_decode_total 122") + len("llamacpp:n_dec")]
    m = parse_server_metrics(cut)
    assert m.counters["llamacpp_tokens_predicted_total"] == 957
    assert "llamacpp_decode_calls_total" not in m.counters and m.bad_lines == 1


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-5"])
def test_bad_values_are_dropped(value):
    m = parse_server_metrics(f"llamacpp:tokens_predicted_total {value}\nllamacpp:requests_processing 1\n")
    assert "llamacpp_tokens_predicted_total" not in m.counters
    assert m.invalid_values == 1 and m.gauges["llamacpp_requests_processing"] == 1


def test_slots_capture():
    s = summarize_slots(json.loads((CAP / "spec_slots.json").read_text()))
    assert (s.total, s.busy, s.speculative, s.spec_types) == (1, 0, 1, "draft-simple")
    b = summarize_slots(json.loads((CAP / "base_slots.json").read_text()))
    assert b.speculative == 0


@pytest.mark.parametrize("payload", [{}, "x", 3, None])
def test_slots_wrong_shape(payload):
    with pytest.raises(ShapeError):
        summarize_slots(payload)


def test_slots_malformed_entries_reject_the_payload():
    # (was: malformed entries counted, the rest used; issue 13: a half-valid /slots is not llama-server's)
    with pytest.raises(ShapeError):
        summarize_slots([{"id": 0, "is_processing": True, "speculative": "yes"}, 7, None])


def test_props_capture():
    p = parse_props(json.loads((CAP / "spec_props.json").read_text()))
    assert (p.build_commit, p.build_number, p.model, p.total_slots) == (
        "0c1e57098", "1", "SmolLM2-135M-Instruct.Q4_1.gguf", 1)


def test_log_lines_from_the_capture():
    acc = LogAcceptance()
    lines = (CAP / "server_log_excerpt.txt").read_text().splitlines()
    assert sum(acc.feed(line) for line in lines) == 5
    c = acc.snapshot()
    assert (c.accepted, c.generated) == (56 + 56 + 33 + 18 + 112, 56 + 56 + 40 + 24 + 112)
    # steps recovered from "mean len": 56/8=7, 7, 33/6.6=5, 18/6=3, 112/8=14
    assert c.drafts == 7 + 7 + 5 + 3 + 14


def test_log_line_from_the_brief_and_junk():
    line = ("slot print_timing: id 0 | task 25 | draft acceptance = 0.75000 (18 accepted / 24 generated), "
            "mean len = 7.00")
    parsed = parse_acceptance_line(line)
    assert parsed is not None and (parsed.accepted, parsed.generated, parsed.drafts) == (18, 24, 3)
    assert parse_acceptance_line("draft acceptance = nan (0 accepted / 0 generated), mean len = 1.00") \
        .drafts is None
    assert parse_acceptance_line("draft acceptance = 2.0 (30 accepted / 10 generated)") is None
    assert parse_acceptance_line("slot print_timing: id 0 | task 3 | prompt eval time = 1 ms") is None


def test_nvidia_smi_rows():
    rows = parse_compute_apps((FIX / "exporter" / "nvidia_smi_compute_apps.csv").read_text())
    assert [(r.pid, r.used_bytes) for r in rows] == [(4242, 1536 * MIB), (4242, 512 * MIB), (977, 300 * MIB)]
    assert parse_compute_apps("No running processes found\n") == []


def test_systemctl_show():
    info = parse_systemctl_show((FIX / "exporter" / "systemctl_show.txt").read_text())
    assert (info.pid, info.systemd_restarts, info.memory_max_bytes) == (4242, 3, 8 << 30)
    stopped = parse_systemctl_show("MainPID=0\nNRestarts=0\nMemoryMax=infinity\n")
    assert (stopped.pid, stopped.systemd_restarts, stopped.memory_max_bytes) == (None, 0, None)


def test_launch_settings_both_flag_eras():
    new = parse_launch(["/opt/llama.cpp/current/bin/llama-server", "-m", "/srv/models/t.gguf", "-md",
                        "/srv/models/d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max=4",
                        "--port", "1"])
    assert (new.target_model, new.draft_model, new.spec_type, new.draft_n_max) == (
        "t.gguf", "d.gguf", "draft-simple", "4")
    assert new.speculation_expected
    old = parse_launch(["llama-server", "--model", "t.gguf", "--model-draft", "d.gguf", "--draft-max", "8"])
    assert old.speculation_expected and old.draft_n_max == "8" and old.spec_type == ""
    base = parse_launch(["llama-server", "-m", "t.gguf", "--spec-type", "none"])
    assert not base.speculation_expected
    trap = parse_launch(["llama-server", "-m", "t.gguf", "-md"])  # truncated argv must not crash
    assert trap.draft_model == ""


def test_launch_settings_of_an_ngram_type_read_its_own_spellings():
    """ngram-mod spells the draft length --spec-ngram-mod-n-max (the knob table's per-type spellings): the exporter
    reads it there, and a draft model's own length outranks it in a list of types."""
    from specops.argv import build_argv
    from specops.capabilities import parse_help
    from specops.profile import ServerProfile

    caps = parse_help((CAP / "llama-server_help.txt").read_text())
    ngram = build_argv(ServerProfile.from_dict({"model": "/m/t.gguf", "spec_type": "ngram-mod", "draft_n_max": 48,
                                                "draft_n_min": 2}), caps)
    assert "--spec-ngram-mod-n-max" in ngram and "--spec-draft-n-max" not in ngram
    got = parse_launch(ngram)
    assert (got.spec_type, got.draft_n_max, got.draft_n_min) == ("ngram-mod", "48", "2")
    both = parse_launch(["llama-server", "-m", "t.gguf", "--spec-ngram-mod-n-max", "48", "--spec-type",
                         "draft-simple,ngram-mod", "-md", "d.gguf", "--spec-draft-n-max", "8"])
    assert (both.draft_n_max, both.draft_n_min) == ("8", "")
    assert parse_launch(["llama-server", "--spec-type", "ngram-cache", "--spec-draft-n-max=5"]).draft_n_max == "5"


def test_the_launch_fields_are_the_knob_tables():
    """Each LaunchSettings field is named after its knob and read in every spelling the table has for it."""
    from dataclasses import fields

    from specops.exporter import process
    from specops.exporter.process import LaunchSettings
    from specops.knobs import knob

    assert process._FIELDS == {"target_model": "model", "draft_model": "draft_model", "spec_type": "spec_type",
                               "draft_n_max": "draft_n_max", "draft_n_min": "draft_n_min",
                               "cache_ram_mib": "cache_ram_mib", "device": "device", "draft_device": "draft_device",
                               "tensor_split": "tensor_split"}
    assert set(process._FIELDS) == {f.name for f in fields(LaunchSettings)} - {"spec_default"}
    for field, name in process._FIELDS.items():
        k = knob(name)
        for flag in (*k.own_spellings, *(f for _t, f in k.per_spec_type)):
            assert getattr(parse_launch(["llama-server", flag, "/x/7"]), field) in ("7", "/x/7"), (field, flag)


def test_pid_by_cmdline_finds_a_process_by_its_port_argument():
    import subprocess
    import sys

    from specops.exporter.process import SystemdPid, pid_by_cmdline

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--port", "65001"])
    try:
        assert pid_by_cmdline(65001) == proc.pid
        # systemctl unusable (here: a missing binary) → PID from the command line, error remembered
        src = SystemdPid("x.service", systemctl="/nonexistent/systemctl", fallback_port=65001)
        assert src.find().pid == proc.pid and src.last_error
    finally:
        proc.kill()
        proc.wait()


def test_the_placement_is_read_off_the_command_line():
    """Where the models run (issue 81): the target's devices and split, the draft's devices, in any spelling."""
    got = parse_launch(["llama-server", "-m", "/m/t.gguf", "--rpc", "127.0.0.1:50052,127.0.0.1:50053", "-dev",
                        "RPC0,RPC1", "-ts", "3,1", "--spec-draft-device", "RPC1"])
    assert (got.device, got.tensor_split, got.draft_device) == ("RPC0,RPC1", "3,1", "RPC1")
    assert parse_launch(["llama-server", "-m", "/m/t.gguf"]).device == ""
    assert parse_launch(["llama-server", "-devd", "CUDA0"]).draft_device == "CUDA0"
