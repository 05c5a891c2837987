"""State-change logging: each change logged while rare, one line a minute with a count while flapping."""

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


def test_a_good_start_then_one_failure_logs_the_failure_and_the_recovery(lines):
    clock = FakeClock()
    log = StateLog(clock)
    log.state("slots", "ok", "")  # the first state, good: silent, and not a line of the budget
    clock.advance(1)
    log.state("slots", "shape", "/slots: an empty list")
    clock.advance(1)
    log.state("slots", "ok", "")
    assert lines() == ["slots: shape: /slots: an empty list", "slots: ok again (was shape)"]


def test_flapping_is_one_line_a_minute_with_a_count_then_steady_again(lines):
    clock = FakeClock()
    log = StateLog(clock)
    for i in range(120):  # two minutes, a change every second
        log.state("metrics", "ok" if i % 2 else "parse", "/metrics: 1 unparseable line(s)")
        clock.advance(1)
    out = lines()
    assert len(out) == 2 + 1, out  # the first two changes, then one summary at 60 s
    assert "flapping: 60 state changes in the last 60s" in out[2], out
    for _ in range(120):  # settles
        log.state("metrics", "ok", "")
        clock.advance(1)
    out = lines()
    assert len(out) == 5 and "flapping: 58 state changes" in out[3] and "steady again" in out[4], out
    log.state("metrics", "parse", "again")  # a change after calm is logged at once
    assert lines()[-1] == "metrics: parse: again"
