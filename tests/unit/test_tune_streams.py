"""The tune at the service's N streams (issue 52 item 2, specops.tune.streams): the plan that fits the time left,
the rule at N (the one-stream rule: only a confident gain stands), and the /slots evidence of N streams in flight.
The measurement itself runs against a real llama-server in tests/integration/test_tune_deploy.py."""

from __future__ import annotations

import httpx
import pytest

from specops.bench.stats import Interval
from specops.soak.saturation import SlotWatcher
from specops.tune import streams

pytestmark = pytest.mark.fast


def test_the_plan_fits_the_time_left() -> None:
    plan = streams.plan_for(2, 120.0, 96, ("t.jsonl",), ())
    assert plan is not None and plan.levels == (2,) and plan.blocks == 4 and plan.phase == 15.0
    assert plan.duration == 120.0 and plan.faults == () and plan.task_files == ("t.jsonl",)
    long = streams.plan_for(4, 1200.0, 96, (), ())
    assert long is not None and long.phase == streams.MAX_PHASE_S and long.blocks == 10  # more blocks, not longer
    short = streams.plan_for(2, 50.0, 96, (), ())
    assert short is not None and short.phase == streams.MIN_PHASE_S and short.blocks == 2
    assert streams.plan_for(2, 39.0, 96, (), ()) is None  # not even two blocks of the shortest phases
    assert streams.reserve_s(360) == 4 * streams.MIN_PHASE_S + streams.START_S + streams.OVERRUN_S  # at least 145 s
    assert streams.reserve_s(1200) == pytest.approx(360)  # a 20-minute tune keeps 30% of it


def at(estimate: float, low: float | None, high: float | None) -> streams.AtN:
    return streams.AtN(2, "exact-ngram-mod", Interval(estimate, low, high, 4), blocks=4)


def test_only_a_confident_gain_at_n_stands() -> None:
    stands, settled, why = streams.verdict(at(1.16, 1.08, 1.25))
    assert (stands, settled) == (True, True)
    assert why == ("exact-ngram-mod at 2 streams 1.16× [1.08, 1.25] against plain decoding at 2 streams (4 blocks)")
    stands, settled, why = streams.verdict(at(0.86, 0.80, 0.93))
    assert (stands, settled) == (False, True) and why.startswith("slower at 2 streams: ")
    stands, settled, why = streams.verdict(at(1.03, 0.95, 1.12))
    assert (stands, settled) == (False, False) and why.endswith("the interval reaches both sides of plain decoding")
    stands, settled, why = streams.verdict(streams.AtN(2, "x", Interval(1.5, None, None, 1), blocks=1))
    assert (stands, settled) == (False, False) and "too few blocks" in why
    assert streams.AtN(2, "x", None).to_dict()["measured"] == "not measured"


def test_slots_processing_together_are_counted_per_poll() -> None:
    """The evidence of N streams in flight: the most slots one /slots answer showed processing at once."""
    answers = iter([
        [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}],
        [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": True, "speculative": True}],
        [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": True}],
        {"error": "not a list"},
    ])
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=next(answers)))
    watcher = SlotWatcher("http://127.0.0.1:1")
    with httpx.Client(transport=transport) as http:
        for _ in range(4):
            watcher.poll_once(http)
    assert watcher.most_at_once == 2 and watcher.polls == 3 and watcher.errors == 1
    assert watcher.slots[0]["processing_seen"] == 2 and watcher.slots[1]["processing_seen"] == 2
