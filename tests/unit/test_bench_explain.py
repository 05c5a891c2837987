"""The identity rules and the explanation of a difference (issue 78), apart from any server: the verdict against
the measured batch spread, how a batch's move of the log-probabilities is measured, the bound on the rate of
differences a count allows, and what each rule makes of explained differences. The explanation against a real
llama-server: tests/integration/test_explain_real.py."""

from __future__ import annotations

import math

import pytest

from specops.bench import explain, identity

pytestmark = pytest.mark.fast


def test_a_near_tie_is_a_gap_within_the_measured_spread_and_a_change_beyond_it() -> None:
    spread = explain.Spread(0.08, 24, 3)
    assert explain.judge(0.05, spread) == identity.NEAR_TIE
    assert explain.judge(0.08, spread) == identity.NEAR_TIE
    assert explain.judge(0.09, spread) == identity.CHANGE
    assert explain.judge(0.05, None) == identity.UNEXPLAINED  # no spread measured: nothing can be called a near-tie


def test_a_batch_move_is_the_largest_change_of_a_difference_between_two_top_tokens() -> None:
    one = explain.Scored({1: (" int", -0.933), 2: (" datetime", -0.983), 3: (" str", -3.0)})
    # the batch lowers " int" by 0.04 and raises " datetime" by 0.03: their difference moves by 0.07
    batch = explain.Scored({1: (" int", -0.973), 2: (" datetime", -0.953), 3: (" str", -3.0)})
    assert explain.move(one, batch) == pytest.approx(0.07)
    assert explain.move(one, explain.Scored({9: ("x", -0.1)})) is None  # nothing shared: no move measured


def _datetime(verdict_spread: float | None) -> explain.Difference:
    spread = None if verdict_spread is None else explain.Spread(verdict_spread, 10, 2)
    gap = -0.933 - -0.983
    return explain.Difference("edit-3", explain.judge(gap, spread), token_index=41, byte_pos=120,
                              plain_token=" int", other_token=" datetime", plain_logprob=-0.933,
                              other_logprob=-0.983, floor=-9.0, top=((" int", -0.933), (" datetime", -0.983)),
                              spread=verdict_spread)


def test_the_line_names_the_task_both_tokens_both_log_probabilities_and_the_verdict() -> None:
    d = _datetime(0.08)
    line = d.line()
    for part in ("edit-3", "token 41", "' datetime'", "' int'", "-0.933", "-0.983", "0.050 nats apart",
                 "within the host's batch spread 0.080", "near-tie"):
        assert part in line, (part, line)
    again = explain.Difference.from_dict(d.to_dict())
    assert again == d and d.to_dict()["gap"] == pytest.approx(0.05)
    assert "beyond the host's batch spread 0.010: change" in _datetime(0.01).line()


def test_a_token_plain_decoding_did_not_list_is_at_least_the_floor_away() -> None:
    d = explain.Difference("code-1", identity.CHANGE, token_index=3, plain_token="a", other_token="zz",
                           plain_logprob=-0.01, other_logprob=None, floor=-7.5, spread=0.1)
    assert d.gap == pytest.approx(7.49)
    assert "< -7.500 (not in its top 20)" in d.line() and "at least 7.490 nats apart" in d.line()


def test_the_upper_bound_on_a_rate_is_clopper_pearson() -> None:
    assert identity.rate_upper(0, 24) == pytest.approx(1 - 0.05 ** (1 / 24), abs=1e-9)
    assert identity.bound_line(0, 24) == "0 of 24 answers (differences): fewer than 12% at 95%"
    # 1 of 8: P(X <= 1 | p) = 0.05 at p = 0.4707 (the exact binomial tail)
    p = identity.rate_upper(1, 8)
    assert (1 - p) ** 8 + 8 * p * (1 - p) ** 7 == pytest.approx(0.05, abs=1e-9)
    assert identity.rate_upper(3, 3) == 1.0 and identity.rate_upper(0, 0) == 1.0
    assert math.isclose(identity.rate_upper(0, 1), 0.95)


def test_each_rule_on_explained_differences() -> None:
    tie, change = {"explained": _datetime(0.08).to_dict()}, {"explained": _datetime(0.01).to_dict()}
    bare = {"task_id": "x"}  # a difference recorded without an explanation
    assert identity.holds("identical", 8, 8, []) is True
    assert identity.holds("identical", 8, 7, [tie]) is False
    assert identity.holds("equivalent", 8, 7, [tie]) is True
    assert identity.holds("equivalent", 8, 6, [tie, change]) is False
    assert identity.holds("equivalent", 8, 7, [bare]) is False
    assert identity.holds("equivalent", 8, 6, [tie]) is False  # a difference not in the list is not explained
    assert identity.holds("fastest", 8, 0, [change]) is True
    assert identity.holds("equivalent", 0, 0, []) is None
    assert identity.summary_line("equivalent", 24, [tie]) == (
        "0 of 24 answers (changes or unexplained): fewer than 12% at 95%; 1 near-tie(s) allowed")
    assert identity.summary_line("identical", 24, [tie]) == (
        "1 of 24 answers (differences): fewer than 19% at 95%; every one a near-tie: this verdict depends on whether "
        "a sample holds one (under equivalent it holds)")
    assert identity.summary_line("identical", 24, [tie, change]) == (  # a change: no sample would pass
        "2 of 24 answers (differences): fewer than 24% at 95%")
    assert identity.summary_line("identical", 24, []) == "0 of 24 answers (differences): fewer than 12% at 95%"
