"""State-change logging (issue 29): only repeats of one message are rate-limited; a new error kind or message,
the start of an outage and its end (with its duration) are always logged."""

from __future__ import annotations

import logging

import pytest

from specops.exporter.statelog import StateLog
from tests.unit.fake_llama_fetcher import FakeClock


class Lines:
    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def __call__(self) -> list[str]:
        return self.caplog.messages


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Lines:
    caplog.set_level(logging.INFO, logger="specops.exporter")
    return Lines(caplog)


def test_a_good_start_then_one_failure_logs_the_failure_and_the_recovery_with_its_duration(lines):
    clock = FakeClock()
    log = StateLog(clock)
    log.state("slots", "ok", "")  # the first state, good: silent
    clock.advance(1)
    log.state("slots", "shape", "/slots: an empty list")
    clock.advance(1)
    log.state("slots", "ok", "")
    assert lines() == ["slots: shape: /slots: an empty list", "slots: ok again after 1.0 s (was shape)"]


def test_flapping_repeats_are_one_line_a_minute_with_a_count(lines):
    clock = FakeClock()
    log = StateLog(clock)
    for i in range(120):  # two minutes, a change every second, the same message every time
        log.state("metrics", "ok" if i % 2 else "parse", "/metrics: 1 unparseable line(s)")
        clock.advance(1)
    out = lines()
    # the first failure and its end, then repeats held back: one summary a minute with their count
    assert out[:2] == ["metrics: parse: /metrics: 1 unparseable line(s)", "metrics: ok again after 1.0 s (was parse)"]
    assert len(out) == 3 and "61 state changes not logged in the last 60s" in out[2], out
    for _ in range(120):  # settles
        log.state("metrics", "ok", "")
        clock.advance(1)
    out = lines()
    assert len(out) == 4 and "57 state changes not logged" in out[3] and out[3].endswith("now ok"), out
    log.state("metrics", "parse", "again")  # a new message: logged at once
    assert lines()[-1] == "metrics: parse: again"


def test_a_new_error_kind_or_message_is_logged_at_once_even_while_flapping(lines):
    clock = FakeClock()
    log = StateLog(clock)
    log.state("metrics", "ok", "")
    faults = [("parse", "/metrics: 1 unparseable line(s)"),
              ("invalid_value", "/metrics: 1 NaN, infinite or negative value(s): llamacpp:x_total nan"),
              ("shape", "/metrics: no llama.cpp series in ''"),
              ("invalid", "/metrics: 2 duplicated series: the body is not one consistent answer"),
              ("shape", "/metrics: no llama.cpp series in '<html><body>502 Bad Gateway</body></html>'"),
              ("shape", "/metrics: no llama.cpp series in '\ufffd\ufffd'"),
              ("invalid_value", "/metrics: 1 NaN, infinite or negative value(s): llamacpp:x_total -5.0")]
    for state, message in faults:  # each for one pass, ok between: an endpoint flapping hard within a minute
        log.state("metrics", state, message)
        clock.advance(1)
        log.state("metrics", "ok", "")
        clock.advance(1)
    warnings = [line for line in lines() if "ok again" not in line]
    assert warnings == [f"metrics: {state}: {message}" for state, message in faults]
    assert len([line for line in lines() if "ok again after 1.0 s" in line]) == len(faults)


def test_an_outage_after_flapping_is_logged_at_its_start_and_its_end_with_its_duration(lines):
    """The issue's report: after two state changes in a minute, 30 s of HTTP 500 gave no line at all."""
    clock = FakeClock()
    log = StateLog(clock)
    log.state("metrics", "ok", "")
    for _ in range(3):
        log.state("metrics", "parse", "/metrics: 1 unparseable line(s)")
        clock.advance(1)
        log.state("metrics", "ok", "")
        clock.advance(1)
    before = len(lines())
    for _ in range(31):
        log.state("metrics", "http_5xx", "GET /metrics: HTTP 500")
        clock.advance(1)
    log.state("metrics", "ok", "")
    assert lines()[before:] == ["metrics: http_5xx: GET /metrics: HTTP 500",
                                "metrics: ok again after 31.0 s (was http_5xx)"]


def test_a_repeated_outage_that_lasts_is_logged_once_it_has_lasted_hold_seconds(lines):
    clock = FakeClock()
    log = StateLog(clock, hold=10)
    log.state("health", "ok", "")
    log.state("health", "connect", "GET /health: [Errno 111] Connection refused")  # killed
    clock.advance(2)
    log.state("health", "ok", "")  # restarted
    clock.advance(2)
    before = len(lines())
    for _ in range(7):  # killed again within the minute: a repeat, held back until it lasts 10 s
        log.state("health", "connect", "GET /health: [Errno 111] Connection refused")
        clock.advance(2)
    assert lines()[before:] == [
        "health: connect: GET /health: [Errno 111] Connection refused (down for 10.0 s)"]
    log.state("health", "ok", "")
    assert lines()[-1] == "health: ok again after 14.0 s (was connect)"


def test_a_short_repeated_blip_is_counted_not_logged(lines):
    clock = FakeClock()
    log = StateLog(clock, hold=10)
    log.state("slots", "ok", "")
    for _ in range(2):
        log.state("slots", "shape", "/slots: an empty list")
        clock.advance(1)
        log.state("slots", "ok", "")
        clock.advance(1)
    assert len(lines()) == 2  # the first blip and its end; the second is a repeat, counted
    clock.advance(60)
    log.state("slots", "ok", "")
    assert "2 state changes not logged" in lines()[-1] and lines()[-1].endswith("now ok")


def test_a_body_that_is_new_garbage_every_pass_cannot_flood_the_log(lines):
    clock = FakeClock()
    log = StateLog(clock, messages=3)
    log.state("metrics", "ok", "")
    for i in range(50):
        log.state("metrics", "shape", f"/metrics: no llama.cpp series in {chr(ord('a') + i % 26) * 3!r}")
        clock.advance(1)
    assert len(lines()) == 3  # three different messages of one kind a minute at most


def test_messages_differing_only_in_numbers_are_repeats():
    from specops.exporter.statelog import message_key

    assert message_key("/metrics: 3 unparseable line(s)") == message_key("/metrics: 12 unparseable line(s)")
    assert message_key("x_total nan") != message_key("x_total -5.0")
