"""The exporter's reading of the deploy's speed-gate record (issue 40): never silent, never stale.

Whenever a record path is configured the exporter says ``specops_speed_gate_record_state{state}`` (one-hot: ok,
missing, invalid, stale); the figures and ``specops_speed_gate_info`` exist only for an ok record of a measured
verdict. A record is ok only while the unit file it names (under the systemd unit directories) still has the sha256
the deploy wrote into it. Here the "systemd unit directory" is a tmp dir handed to the reader (``unit_dirs``), and
files are replaced the way the deploy does it (write beside, rename over). The deploy's auto-tune, kept in the record
(``tune``), is exported (``specops_tune_*``) for any ok record whatever its verdict; a malformed one costs only its
own series.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from specops.bench.costmodel import Overheads, Run, StepCosts
from specops.exporter import speedgate
from specops.exporter.collector import SpecopsCollector
from specops.exporter.speedgate import INVALID, MISSING, OK, STALE, STATES, UNIT_DIRS, SpeedGateFile, unit_path_problem
from specops.tune import band as bands
from specops.tune import live
from tests.unit.fake_llama_fetcher import CAP, SPEC_METRICS, Answer, FakeClock, FakeFetcher, fake_scraper
from tests.unit.test_exporter_golden import doubled

SPECULATIVE_UNIT = "[Service]\nExecStart=/opt/llama.cpp/bin/llama-server -md /srv/d.gguf --spec-type draft-simple\n"
PLAIN_UNIT = "[Service]\nExecStart=/opt/llama.cpp/bin/llama-server --spec-type none\n"


def put(path: Path, text: str) -> None:
    """Replace ``path`` as the deploy does (Ansible's copy: a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Host:
    """A record path and a systemd unit directory in ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.units = tmp / "systemd" / "system"
        self.units.mkdir(parents=True)
        self.unit = self.units / "llama-server-speculative.service"
        self.record = tmp / "speed-gate.json"

    def install(self, unit_text: str) -> None:
        put(self.unit, unit_text)

    def write(self, unit_text: str | None = None, **kw: object) -> dict[str, object]:
        """A record for the unit written with ``unit_text`` (the one on disk when None), as the deploy writes it."""
        text = unit_text if unit_text is not None else self.unit.read_text()
        record = {"plain_tps": 15.1, "speculative_tps": 9.1, "ratio": 0.6, "min_ratio": 1.0,
                  "break_even_acceptance": 1.3, "verdict": "loses", "action": "fallback", "serving": "plain",
                  "spec_type": "draft-simple", "mode": "side by side", "measured_at": "2026-11-23T14:00:00Z",
                  "build_id": "x", "unit_file": str(self.unit), "installed_unit_sha256": sha(text), **kw}
        record = {k: v for k, v in record.items() if v is not None}
        put(self.record, json.dumps(record))
        return record

    def reader(self) -> SpeedGateFile:
        return SpeedGateFile(str(self.record), unit_dirs=(str(self.units),))


@pytest.fixture
def host(tmp_path: Path) -> Host:
    h = Host(tmp_path)
    h.install(PLAIN_UNIT)
    return h


# ---- the four states -------------------------------------------------------------------------------------------

def test_a_record_for_the_unit_on_disk_is_ok_with_its_figures(host: Host) -> None:
    host.write()
    r = host.reader().check()
    assert r.state == OK and r.gate is not None
    assert r.gate.numbers["plain_tps"] == 15.1 and r.gate.labels["serving"] == "plain"


def test_no_file_is_missing(host: Host) -> None:
    r = host.reader().check()
    assert (r.state, r.gate) == (MISSING, None) and str(host.record) in r.why


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "not valid JSON"),
    ('{"verdict": "pays", ', "not valid JSON"),
    ("", "not valid JSON"),
    ("[1, 2]", "JSON list, not a record"),
    ('{"verdict": "great"}', "verdict is 'great'"),
    ('{"verdict": "pays", "plain_tps": NaN, "speculative_tps": 9}', "plain_tps is nan"),
    ('{"verdict": "loses", "plain_tps": 15, "speculative_tps": -1}', "speculative_tps is -1"),
    ('{"verdict": "loses", "plain_tps": 15, "speculative_tps": "fast"}', "speculative_tps is 'fast', not a number"),
    ('{"verdict": "pays", "ratio": 1.2}', "without plain_tps and speculative_tps"),
    ('{"verdict": "not_measured", "unit_file": "/etc/passwd", "installed_unit_sha256": "' + "0" * 64 + '"}',
     "is not under"),
    ('{"verdict": "not_measured", "unit_file": "units/x.service", "installed_unit_sha256": "' + "0" * 64 + '"}',
     "not an absolute, normalised path"),
    ('{"verdict": "not_measured", "unit_file": 7}', "unit_file is 7, not a path"),
    ('{"verdict": "not_measured", "installed_unit_sha256": "ABC"}', "not a sha256 in lower-case hex"),
])
def test_what_is_not_a_record_is_invalid_and_says_why(host: Host, content: str, why: str) -> None:
    put(host.record, content)
    r = host.reader().check()
    assert (r.state, r.gate) == (INVALID, None)
    assert why in r.why and "re-run the deploy" in r.why, r.why


def test_bytes_that_are_not_text_and_a_directory_are_invalid(host: Host) -> None:
    host.record.write_bytes(b'{"verdict": "\xff"}')
    assert "not UTF-8" in host.reader().check().why
    host.record.unlink()
    host.record.mkdir()
    r = host.reader().check()
    assert r.state == INVALID and "not a regular file" in r.why


def test_a_unit_file_outside_the_systemd_directories_is_refused(host: Host) -> None:
    """The exporter hashes no file but an installed unit: not /etc/shadow, not a path that climbs out."""
    for bad in ("/etc/shadow", "/etc/systemd/system/../../shadow", "/etc/systemd/system", "/etc/systemd/systemd.x",
                "//etc/systemd/system/x.service", "/etc/systemd/system/./x.service"):
        assert unit_path_problem(bad), bad
    for good in ("/etc/systemd/system/llama-server-speculative.service", "/run/systemd/system/x.service"):
        assert unit_path_problem(good) == "" and unit_path_problem(good, UNIT_DIRS) == "", good
    outside = host.units.parent / "elsewhere.service"
    outside.write_text(PLAIN_UNIT)
    host.write(unit_file=str(outside))
    r = host.reader().check()
    assert r.state == INVALID and "is not under" in r.why


@pytest.mark.parametrize("drop", ["unit_file", "installed_unit_sha256"])
def test_a_record_that_names_no_unit_is_stale(host: Host, drop: str) -> None:
    """Records of deploys before issue 40 (no unit fields): nothing says they describe what runs."""
    host.write(**{drop: None})
    r = host.reader().check()
    assert (r.state, r.gate) == (STALE, None) and "names no unit" in r.why


def test_a_unit_file_that_is_gone_or_not_a_file_is_stale(host: Host) -> None:
    host.write()
    reader = host.reader()
    assert reader.check().state == OK
    host.unit.unlink()
    r = reader.check()
    assert (r.state, r.gate) == (STALE, None) and "cannot be read" in r.why
    host.unit.mkdir()
    assert reader.check().state == STALE


def test_the_record_goes_stale_when_the_unit_changes_and_ok_when_the_deploy_rewrites_it(host: Host) -> None:
    """The issue: a fallback's record (serving plain) kept being exported after the unit went back to speculating."""
    reader = host.reader()
    host.write()  # the fallback: serving plain, loses
    assert reader.check().state == OK
    host.install(SPECULATIVE_UNIT)  # the unit changed under the record (a later deploy, a hand edit)
    r = reader.check()
    assert (r.state, r.gate) == (STALE, None) and "has changed since the deploy wrote the record" in r.why
    host.write(verdict="pays", serving="speculative", action="fallback", ratio=1.3, speculative_tps=19.6)
    r = reader.check()
    assert r.state == OK and r.gate is not None and r.gate.labels["serving"] == "speculative"
    # and a unit put back as it was (a rollback with its record) is ok again with the old record
    host.install(PLAIN_UNIT)
    assert reader.check().state == STALE
    host.write()
    assert reader.check().state == OK


@pytest.mark.parametrize("verdict", ["unproven", "not_measured"])
def test_a_record_without_a_measurement_is_ok_and_has_no_figures(host: Host, verdict: str) -> None:
    if verdict == "unproven":
        host.write(verdict=verdict, unproven_because="the servers were not idle")
    else:
        host.write(verdict=verdict, plain_tps=None, speculative_tps=None, ratio=None, break_even_acceptance=None,
                   min_ratio=None, action="off")
    r = host.reader().check()
    assert (r.state, r.gate) == (OK, None)
    assert f"verdict {verdict}" in r.why


def test_the_record_follows_every_change_on_disk(host: Host) -> None:
    reader = host.reader()
    steps = [
        (lambda: None, MISSING),
        (lambda: host.write(), OK),
        (lambda: host.record.unlink(), MISSING),
        (lambda: put(host.record, "{not json"), INVALID),
        (lambda: host.write(), OK),
        (lambda: host.install(SPECULATIVE_UNIT), STALE),
        (lambda: host.write(), OK),
    ]
    for change, want in steps:
        change()
        assert reader.check().state == want


# ---- cheap: two stat calls per scrape --------------------------------------------------------------------------

def test_the_unit_is_hashed_only_when_it_changes_and_the_record_read_only_when_it_changes(host, monkeypatch):
    hashed: list[str] = []
    parsed: list[object] = []
    real_sha, real_validate = speedgate.sha256_of, speedgate.validate
    monkeypatch.setattr(speedgate, "sha256_of", lambda p: hashed.append(p) or real_sha(p))
    monkeypatch.setattr(speedgate, "validate", lambda *a, **k: parsed.append(a) or real_validate(*a, **k))
    host.write()
    reader = host.reader()
    for _ in range(5):
        assert reader.check().state == OK
    assert len(hashed) == 1 and len(parsed) == 1
    os.utime(host.unit, (1, 1))  # touched (same bytes): hashed again, still ok
    assert reader.check().state == OK and len(hashed) == 2 and len(parsed) == 1
    host.install(SPECULATIVE_UNIT)
    for _ in range(3):
        assert reader.check().state == STALE
    assert len(hashed) == 3 and len(parsed) == 1
    host.write()
    assert reader.check().state == OK and len(parsed) == 2 and len(hashed) == 3


def test_each_change_of_state_is_logged_once_naming_why(host, caplog):
    reader = host.reader()
    with caplog.at_level(logging.INFO, logger="specops.exporter.speedgate"):
        for _ in range(3):
            reader.check()  # missing
        host.write()
        for _ in range(3):
            reader.check()  # ok
        host.install(SPECULATIVE_UNIT)
        for _ in range(3):
            reader.check()  # stale
        put(host.record, "[]")
        for _ in range(3):
            reader.check()  # invalid
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "INFO", "WARNING", "WARNING"], lines
    assert "is missing" in lines[0][1] and "is ok for" in lines[1][1]
    assert f"stale: {host.unit} has changed" in lines[2][1] and "JSON list" in lines[3][1]
    assert all("re-run the deploy" in msg for level, msg in lines if level == "WARNING")


# ---- what the exporter exposes ---------------------------------------------------------------------------------

def exposition(host: Host | None, record_path: str | None = None) -> dict[str, list]:
    clock = FakeClock()
    cfg: dict[str, object] = {}
    if host is not None:
        cfg = {"speed_gate_file": record_path or str(host.record), "speed_gate_unit_dirs": (str(host.units),)}
    scraper = fake_scraper(FakeFetcher(), clock, **cfg)
    scraper.scrape_once()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecopsCollector(scraper))
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def one_hot(fams: dict[str, list]) -> str:
    samples = fams["specops_speed_gate_record_state"]
    assert sorted(s.labels["state"] for s in samples) == sorted(STATES)
    on = [s.labels["state"] for s in samples if s.value == 1]
    assert len(on) == 1 and all(s.value in (0, 1) for s in samples), samples
    return on[0]


FIGURES = ("specops_speed_gate_plain_decode_tokens_per_second",
           "specops_speed_gate_speculative_decode_tokens_per_second", "specops_speed_gate_ratio",
           "specops_speed_gate_break_even_acceptance", "specops_speed_gate_timestamp_seconds",
           "specops_speed_gate_info")


def test_the_exporter_says_the_state_and_exports_figures_only_for_an_ok_measured_record(host: Host) -> None:
    def figures(fams: dict[str, list]) -> list[str]:
        return [name for name in FIGURES if name in fams]

    fams = exposition(host)
    assert one_hot(fams) == MISSING and figures(fams) == []
    host.write()
    fams = exposition(host)
    assert one_hot(fams) == OK and figures(fams) == list(FIGURES)
    assert fams["specops_speed_gate_plain_decode_tokens_per_second"][0].value == 15.1
    assert fams["specops_speed_gate_info"][0].labels["serving"] == "plain"
    host.install(SPECULATIVE_UNIT)
    fams = exposition(host)
    assert one_hot(fams) == STALE and figures(fams) == []  # never the stale verdict
    put(host.record, "{not json")
    fams = exposition(host)
    assert one_hot(fams) == INVALID and figures(fams) == []
    host.write(verdict="not_measured", plain_tps=None, speculative_tps=None, ratio=None, break_even_acceptance=None,
               min_ratio=None, action="off")
    fams = exposition(host)
    assert one_hot(fams) == OK and figures(fams) == []


def test_without_a_record_path_there_is_no_record_state(host: Host) -> None:
    host.write()
    fams = exposition(None)
    assert "specops_speed_gate_record_state" not in fams and not any(n in fams for n in FIGURES)


# ---- the deploy's auto-tune, kept in the record (``tune``) ------------------------------------------------------

TUNE = {"chosen": "exact-n8", "reason": "the fastest measured that is identical to plain decoding",
        "spec_type": "draft-simple", "draft_n_max": 8, "predicted": 1.26, "measured": "1.10× [1.08, 1.11]",
        "speedup": {"estimate": 1.10, "low": 1.08, "high": 1.11, "n": 12}, "runner_up": "exact-n4",
        "runner_up_measured": "1.05× [1.03, 1.07]", "best_measured": None,
        "applied": {"llama_server_draft_n_max": 8}, "kept": {}, "reused": False, "when": "2026-11-27T06:00:00+0000",
        "key": "abc123", "build": {"commit": "0c1e57098"}, "models": {}, "device": "cpu: test x2", "open": [],
        "concurrency": "one stream", "candidates": [{"name": "exact-n8", "predicted": 1.26,
                                                     "measured": "1.10× [1.08, 1.11]", "verdict": "chosen"}],
        "tasks": "edits.jsonl (sha256 0123456789abcdef)", "mix": "edit 70%, prose 30%"}
WHAT = {"tasks": "edits.jsonl (sha256 0123456789abcdef)", "mix": "edit 70%, prose 30%"}
TUNE_SERIES = ("specops_tune_info", "specops_tune_draft_n_max", "specops_tune_measured_speedup",
               "specops_tune_measured_speedup_low", "specops_tune_measured_speedup_high",
               "specops_tune_predicted_speedup")


def tune_series(fams: dict[str, list]) -> dict[str, float]:
    return {name: fams[name][0].value for name in TUNE_SERIES if name in fams}


def test_an_ok_record_with_a_tune_exports_its_choice_and_figures(host: Host) -> None:
    host.write(tune=TUNE)
    r = host.reader().check()
    assert r.state == OK and r.tune is not None and r.gate is not None
    fams = exposition(host)
    assert one_hot(fams) == OK
    assert tune_series(fams) == {"specops_tune_info": 1.0, "specops_tune_draft_n_max": 8.0,
                                 "specops_tune_measured_speedup": 1.10, "specops_tune_measured_speedup_low": 1.08,
                                 "specops_tune_measured_speedup_high": 1.11, "specops_tune_predicted_speedup": 1.26}
    assert fams["specops_tune_info"][0].labels == {"chosen": "exact-n8", "spec_type": "draft-simple",
                                                   "when": "2026-11-27T06:00:00+0000", "reused": "false", **WHAT}
    assert all(name in fams for name in FIGURES)  # and the gate's own series, as without a tune


def test_a_tune_without_figures_exports_only_what_it_has(host: Host) -> None:
    """Plain decoding chosen (no draft length, no spec type) from a reused result: no number is made up."""
    host.write(tune={**TUNE, "chosen": "plain", "spec_type": None, "draft_n_max": None, "predicted": 0,
                     "speedup": {"estimate": 1.0, "low": None, "high": None, "n": 1}, "reused": True})
    fams = exposition(host)
    assert tune_series(fams) == {"specops_tune_info": 1.0, "specops_tune_measured_speedup": 1.0}
    assert fams["specops_tune_info"][0].labels == {"chosen": "plain", "spec_type": "unknown",
                                                   "when": "2026-11-27T06:00:00+0000", "reused": "true", **WHAT}


def test_a_tune_is_exported_whatever_the_gates_verdict(host: Host) -> None:
    """The gate off (not_measured, no gate figures) while the tune ran: its figures stand on their own."""
    host.write(verdict="not_measured", plain_tps=None, speculative_tps=None, ratio=None, break_even_acceptance=None,
               min_ratio=None, action="off", tune=TUNE)
    fams = exposition(host)
    assert one_hot(fams) == OK and not any(name in fams for name in FIGURES)
    assert tune_series(fams)["specops_tune_measured_speedup"] == 1.10 and len(tune_series(fams)) == len(TUNE_SERIES)


def test_a_stale_or_missing_record_exports_no_tune(host: Host) -> None:
    host.write(tune=TUNE)
    host.install(SPECULATIVE_UNIT)  # the unit changed since: the tune is another unit's too
    fams = exposition(host)
    assert one_hot(fams) == STALE and tune_series(fams) == {}
    host.record.unlink()
    fams = exposition(host)
    assert one_hot(fams) == MISSING and tune_series(fams) == {}


@pytest.mark.parametrize(("tune", "why"), [
    ("exact-n8", "tune is a JSON str, not an object"),
    ([TUNE], "tune is a JSON list"),
    ({**TUNE, "chosen": ""}, "tune.chosen is ''"),
    ({**TUNE, "chosen": None}, "tune.chosen is 'None'"),
    ({**TUNE, "draft_n_max": True}, "tune.draft_n_max is True, not a number"),
    ({**TUNE, "draft_n_max": "8"}, "tune.draft_n_max is '8', not a number"),
    ({**TUNE, "predicted": -1.2}, "tune.predicted is -1.2, not a finite number >= 0"),
    ({**TUNE, "speedup": {"estimate": float("inf"), "low": 1.0, "high": 1.2}}, "tune.speedup.estimate is inf"),
    ({**TUNE, "speedup": {"estimate": float("nan")}}, "tune.speedup.estimate is nan"),
    ({**TUNE, "speedup": "1.10×"}, "tune.speedup is a JSON str"),
    ({**TUNE, "reused": "yes"}, "tune.reused is 'yes'"),
    ({**TUNE, "when": 1764223200}, "tune.when is '1764223200', not a string"),
])
def test_a_malformed_tune_loses_its_own_series_not_the_record(host: Host, caplog, tune: object, why: str) -> None:
    host.write(tune=tune)
    reader = host.reader()
    with caplog.at_level(logging.INFO, logger="specops.exporter.speedgate"):
        for _ in range(3):
            r = reader.check()
            assert r.state == OK and r.gate is not None and r.tune is None
            assert why not in r.why  # the record's own line says nothing of it
    warned = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warned) == 1 and why in warned[0] and "malformed tune" in warned[0], warned
    fams = exposition(host)
    assert one_hot(fams) == OK and all(name in fams for name in FIGURES)
    assert tune_series(fams) == {}


def test_a_malformed_tune_is_logged_again_only_when_it_changes(host: Host, caplog) -> None:
    reader = host.reader()
    with caplog.at_level(logging.INFO, logger="specops.exporter.speedgate"):
        for tune in ({**TUNE, "draft_n_max": "8"}, TUNE, {**TUNE, "draft_n_max": "8"}):  # bad, fixed, bad again
            host.write(tune=tune)
            for _ in range(3):
                assert reader.check().state == OK
    warned = [rec.getMessage() for rec in caplog.records if "malformed tune" in rec.getMessage()]
    assert len(warned) == 2, warned


# ---- the tuned profile priced on the live traffic (issue 52 item 3) ---------------------------------------------

def live_model() -> dict[str, object]:
    """A model as the tune keeps it (:mod:`specops.tune.live`): a CPU target's costs, the chosen arm's counters."""
    costs = StepCosts(0.1, {1: 1.0, 2: 1.3, 5: 1.6, 9: 2.4, 17: 3.3})
    blocks = [{"results": {"baseline": {"decode_tps": 10.0, "n_predicted": 96},
                           "cand": {"decode_tps": 14.0, "n_predicted": 96,
                                    "spec": {"drafts": 4, "draft_tokens": 120, "accepted": 60}}}}]
    m, why = live.build(costs, Overheads(0.002), blocks, "cand", "baseline")
    assert m is not None, why
    return m.to_dict()


LIVE = "specops_tune_live_predicted_speedup"


def live_exposition(host: Host, metrics: str = SPEC_METRICS, passes: int = 2,
                    slots: bytes | None = None) -> dict[str, list]:
    """The exporter after ``passes`` passes of the server's capture, every counter doubled between two passes
    (traffic), with the record at the host's path: each family's samples."""
    return {name: f.samples for name, f in live_families(host, metrics, passes, slots).items()}


def live_families(host: Host, metrics: str = SPEC_METRICS, passes: int = 2,
                  slots: bytes | None = None) -> dict[str, Metric]:
    """:func:`live_exposition`'s families whole (their HELP too)."""
    clock = FakeClock()
    f = FakeFetcher()
    if slots is not None:
        f.routes["/slots"] = Answer(body=slots)
    scraper = fake_scraper(f, clock, speed_gate_file=str(host.record), speed_gate_unit_dirs=(str(host.units),))
    for i in range(passes):
        f.routes["/metrics"] = Answer(body=metrics.encode() if i == 0 else doubled(metrics))
        scraper.scrape_once()
        clock.advance(5.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecopsCollector(scraper))
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def counter(text: str, name: str) -> float:
    return next(float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(name + " "))


def test_the_live_prediction_prices_the_windows_counters_with_the_tunes_model(host: Host) -> None:
    host.write(tune={**TUNE, "live_model": live_model()})
    fams = live_exposition(host)
    assert one_hot(fams) == OK and tune_series(fams)["specops_tune_measured_speedup"] == 1.10
    # the window's increases are the capture's counters themselves (doubled between the two passes)
    run = Run(*(counter(SPEC_METRICS, f"llamacpp:{k}") for k in (
        "tokens_predicted_total", "tokens_predicted_seconds_total", "spec_decode_num_drafts_total",
        "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total")))
    expected = live.parse(live_model()).predict(run)
    assert expected is not None and fams[LIVE][0].value == pytest.approx(expected)


def test_no_live_prediction_without_traffic_without_a_model_or_while_plain_decoding_is_served(host: Host) -> None:
    host.write(tune={**TUNE, "live_model": live_model()})
    assert LIVE not in live_exposition(host, passes=1)  # one pass: no window yet
    plain = (CAP / "base_metrics.txt").read_text()
    fams = live_exposition(host, plain, slots=(CAP / "base_slots.json").read_bytes())
    assert LIVE not in fams and "specops_tune_info" in fams  # plain decoding served: absent, never 0
    host.write(tune=TUNE)  # a record from before the live model
    assert LIVE not in live_exposition(host)


def test_a_malformed_live_model_loses_the_live_prediction_only(host: Host, caplog) -> None:
    host.write(tune={**TUNE, "live_model": {**live_model(), "measured": -1}})
    with caplog.at_level(logging.INFO, logger="specops.exporter.speedgate"):
        fams = live_exposition(host)
    assert LIVE not in fams and tune_series(fams)["specops_tune_measured_speedup"] == 1.10
    warned = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warned) == 1 and "tune.live_model.measured is -1" in warned[0] and LIVE in warned[0], warned
    assert "no specops_tune_* series" not in warned[0]


# ---- the live check's prediction band for a window of n requests (issue 62 item 7) ------------------------------

BAND_SERIES = ("specops_tune_live_window_requests", "specops_tune_live_band_low", "specops_tune_live_band_high",
               "specops_tune_live_predicted_speedup_upper")


def banded_model() -> dict[str, object]:
    """The model with a band as the tune keeps it (:mod:`specops.tune.band`): the spread at the shares (at the traffic
    band's level) and the windows' own (at the loss check's)."""
    band = bands.Band(bands.Spread(bands.SHARES, 96.0, 1.2, ((1.0, 0.8, 1.9), (10.0, 0.95, 1.5), (100.0, 1.05, 1.35)),
                                   level=0.95),
                      bands.Spread(bands.SHARES, 96.0, 1.2, ((1.0, 0.85, 1.8), (10.0, 1.0, 1.4), (100.0, 1.12, 1.28)),
                                   level=0.99))
    return {**live_model(), "band": band.to_dict()}


def test_the_band_is_read_at_the_windows_requests_beside_the_live_prediction(host: Host) -> None:
    host.write(tune={**TUNE, "live_model": banded_model()})
    fams = live_exposition(host)
    tokens = counter(SPEC_METRICS, "llamacpp:tokens_predicted_total")  # the window's increase (doubled once)
    band = bands.parse(banded_model()["band"])
    low, high = band.edges(tokens)
    assert fams["specops_tune_live_window_requests"][0].value == pytest.approx(tokens / 96)
    assert fams["specops_tune_live_band_low"][0].value == pytest.approx(low)
    assert fams["specops_tune_live_band_high"][0].value == pytest.approx(high)
    live_value = fams[LIVE][0].value
    assert fams["specops_tune_live_predicted_speedup_upper"][0].value == pytest.approx(band.upper(live_value, tokens))
    assert fams["specops_tune_live_predicted_speedup_upper"][0].value >= live_value
    # each series says its own level: the traffic band's, the loss check's
    helps = {n: live_families(host)[n].documentation for n in BAND_SERIES}
    assert all(helps[f"specops_tune_live_band_{e}"].startswith(f"{e.capitalize()} end of the 95% prediction band")
               for e in ("low", "high"))
    assert "can be at 99%," in helps["specops_tune_live_predicted_speedup_upper"]
    assert "prediction band for a window of n requests" in helps["specops_tune_live_band_low"]
    assert "Not a confidence interval" in helps["specops_tune_live_band_high"]


def test_a_record_from_before_issue_79_reads_its_spread_at_the_shares_alone(host: Host) -> None:
    # as the tune wrote it before issue 79 item 4: one level for all, and each workload's spread alone after the one
    # at the shares (edits alone reaching well above it); the exporter reads the spread at the shares only, at 99%
    old = json.loads(json.dumps(banded_model()["band"]))
    for spread in (*old["spreads"], old["windows"]):
        spread.pop("level")
    old["level"] = 0.99
    rows = ((1.0, 0.9, 2.4), (10.0, 1.05, 1.8), (100.0, 1.15, 1.6))
    old["spreads"].append({**old["spreads"][0], "mix": "edit",
                           "windows": [{"n": n, "low": lo, "high": hi} for n, lo, hi in rows]})
    host.write(tune={**TUNE, "live_model": {**live_model(), "band": old}})
    fams = live_exposition(host)
    tokens = counter(SPEC_METRICS, "llamacpp:tokens_predicted_total")
    low, high = bands.parse(old).shares.at(tokens / 96)
    assert fams["specops_tune_live_band_low"][0].value == pytest.approx(low)
    assert fams["specops_tune_live_band_high"][0].value == pytest.approx(high)
    assert bands.Spread("edit", 96.0, 1.2, rows).at(tokens / 96)[1] > 1.05 * high  # the envelope's edge, not read
    helps = {n: live_families(host)[n].documentation for n in BAND_SERIES}
    assert "the 99% prediction band" in helps["specops_tune_live_band_low"]
    assert "can be at 99%," in helps["specops_tune_live_predicted_speedup_upper"]


def test_no_band_without_the_live_prediction_or_in_a_record_from_before_it(host: Host) -> None:
    host.write(tune={**TUNE, "live_model": banded_model()})
    assert not any(n in live_exposition(host, passes=1) for n in BAND_SERIES)  # no window yet
    plain = (CAP / "base_metrics.txt").read_text()
    assert not any(n in live_exposition(host, plain, slots=(CAP / "base_slots.json").read_bytes())
                   for n in BAND_SERIES)  # plain decoding served
    host.write(tune={**TUNE, "live_model": live_model()})  # a model without a band: the live figure alone
    fams = live_exposition(host)
    assert LIVE in fams and not any(n in fams for n in BAND_SERIES)


def test_a_malformed_band_loses_the_band_only(host: Host, caplog) -> None:
    model = banded_model()
    model["band"]["spreads"][0]["windows"][1]["low"] = "0.9"  # type: ignore[index]
    host.write(tune={**TUNE, "live_model": model})
    with caplog.at_level(logging.INFO, logger="specops.exporter.speedgate"):
        fams = live_exposition(host)
    assert LIVE in fams and not any(n in fams for n in BAND_SERIES)
    warned = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warned) == 1 and "tune.live_model.band.spreads[0].windows[1].low is '0.9'" in warned[0], warned
    assert "no specops_tune_live_band_* series" in warned[0]
