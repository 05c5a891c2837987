"""Soak building blocks: backoff, accounting, retries, references, RSS trend, per-minute series."""

from __future__ import annotations

import random

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specops.client import ServerError
from specops.soak.accounting import FAILED, RETRIED, SUCCEEDED, Attempt, Ledger, RequestRecord
from specops.soak.backoff import Backoff
from specops.soak.reference import ReferenceSet, first_divergence
from specops.soak.requester import BadReply, classify, execute, parse_reply
from specops.soak.timeline import build
from specops.soak.trend import RssSample, segments, slope_per_hour, summarize


def reply(text: str = "hello", n: int = 10, ms: float = 100.0, draft: int | None = 8, acc: int = 6) -> dict:
    timings: dict = {"predicted_n": n, "predicted_ms": ms}
    if draft is not None:
        timings.update(draft_n=draft, draft_n_accepted=acc)
    return {"choices": [{"message": {"content": text}}], "timings": timings}


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def scripted(*outcomes: object):
    it = iter(outcomes)

    def send() -> object:
        item = next(it)
        if isinstance(item, BaseException):
            raise item
        return item

    return send


# ---- backoff ------------------------------------------------------------------------------------
def test_backoff_doubles_and_caps() -> None:
    b = Backoff(initial=0.5, factor=2.0, max_delay=4.0, jitter=0.0)
    assert [b.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.base_delay(10_000) == 4.0  # no overflow


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=0, max_value=2**32))
def test_backoff_jitter_stays_within_bounds(retry: int, seed: int) -> None:
    b = Backoff(initial=0.1, factor=3.0, max_delay=30.0, jitter=0.25)
    d = b.delay(retry, random.Random(seed))
    assert b.base_delay(retry) * 0.75 <= d <= b.base_delay(retry)


@pytest.mark.parametrize("kw", [{"initial": 0}, {"factor": 0.5}, {"max_delay": 0.1, "initial": 1},
                                {"jitter": 1.0}, {"max_attempts": 0}, {"give_up_after": 0}])
def test_backoff_rejects_nonsense(kw: dict) -> None:
    with pytest.raises(ValueError):
        Backoff(**kw)


# ---- accounting ---------------------------------------------------------------------------------
def test_ledger_counts_outcomes_and_finds_lost_requests() -> None:
    ledger = Ledger()
    a = ledger.issue("load", "t1")
    a.attempts.append(Attempt(0, 1, True))
    b = ledger.issue("load", "t2")
    b.attempts += [Attempt(0, 1, False, "connect", "refused"), Attempt(2, 3, True)]
    c = ledger.issue("load", "t3")
    c.attempts.append(Attempt(0, 1, False, "http_4xx", "HTTP 400"))
    ledger.issue("load", "t4")  # never recorded
    for r in (a, b, c):
        ledger.record(r)
    s = ledger.summary()
    assert (s[SUCCEEDED], s[RETRIED], s[FAILED], s["lost"]) == (1, 1, 1, 1)
    assert s["lost_seqs"] == [3]
    assert s["failed_reasons"] == {"http_4xx: HTTP 400": 1}
    assert s["attempt_errors"] == {"connect": 1, "http_4xx": 1}
    with pytest.raises(ValueError):
        ledger.record(a)
    with pytest.raises(ValueError):
        ledger.record(RequestRecord(99, "load", "x", [Attempt(0, 1, True)]))


def test_record_without_attempts_fails_with_a_reason() -> None:
    r = RequestRecord(0, "load", "t")
    r.finish()
    assert r.outcome == FAILED and r.reason == "no attempt was made"


# ---- retries ------------------------------------------------------------------------------------
def test_retry_then_success_keeps_every_attempt() -> None:
    clock = FakeClock()
    rec = RequestRecord(0, "load", "t")
    send = scripted(httpx.ConnectError("refused"), ServerError("POST /v1/chat/completions: HTTP 503: loading"),
                    reply("ok", n=20, ms=200, draft=10, acc=7))
    execute(rec, send, Backoff(initial=1, jitter=0), clock, sleep=clock.sleep)
    assert rec.outcome == RETRIED and rec.reason is None
    assert [a.error_kind for a in rec.attempts] == ["connect", "http_5xx", None]
    assert clock.t == pytest.approx(3.0)  # 1 s then 2 s of backoff
    assert (rec.text, rec.predicted_n, rec.draft_n, rec.draft_accepted) == ("ok", 20, 10, 7)


def test_client_error_is_not_retried() -> None:
    clock = FakeClock()
    rec = execute(RequestRecord(0, "load", "t"), scripted(ServerError("POST /x: HTTP 400: bad")), Backoff(),
                  clock, sleep=clock.sleep)
    assert rec.outcome == FAILED and len(rec.attempts) == 1
    assert rec.reason is not None and rec.reason.startswith("http_4xx (not retried)")


def test_gives_up_after_max_attempts_with_the_last_error() -> None:
    clock = FakeClock()
    send = scripted(*[httpx.ReadTimeout("slow")] * 3)
    rec = execute(RequestRecord(0, "load", "t"), send, Backoff(max_attempts=3, jitter=0), clock, sleep=clock.sleep)
    assert rec.outcome == FAILED and len(rec.attempts) == 3
    assert rec.reason == "gave up after 3 attempts; last: timeout: slow"


def test_gives_up_after_the_time_budget() -> None:
    clock = FakeClock()
    send = scripted(*[httpx.ConnectError("refused")] * 100)
    rec = execute(RequestRecord(0, "load", "t"), send, Backoff(initial=4, max_delay=4, jitter=0, give_up_after=10),
                  clock, sleep=clock.sleep)
    assert rec.outcome == FAILED and len(rec.attempts) == 3  # at 0, 4, 8; the next would start past 10 s
    assert rec.reason is not None and rec.reason.startswith("gave up after 8s")


def test_abort_stops_retrying() -> None:
    clock = FakeClock()
    rec = execute(RequestRecord(0, "load", "t"), scripted(httpx.ConnectError("refused")), Backoff(), clock,
                  sleep=clock.sleep, abort=lambda: True)
    assert rec.outcome == FAILED and rec.reason == "aborted; last: connect: refused"


@pytest.mark.parametrize(("exc", "kind"), [
    (httpx.ConnectError("x"), "connect"),
    (httpx.ReadTimeout("x"), "timeout"),
    (httpx.RemoteProtocolError("x"), "connection_lost"),
    (httpx.ReadError("x"), "connection_lost"),
    (ServerError("POST /v1/chat/completions: HTTP 500: boom"), "http_5xx"),
    (ServerError("POST /v1/chat/completions: HTTP 429: busy"), "http_busy"),
    (ServerError("POST /v1/chat/completions: HTTP 404: nope"), "http_4xx"),
    (ServerError("POST /v1/chat/completions: invalid JSON: 'xx'"), "garbage"),
    (ServerError("unexpected chat response shape: {}"), "bad_shape"),
    (BadReply("no timings"), "bad_shape"),
    (KeyError("bug"), "internal"),
])
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc)[0] == kind


def test_parse_reply_without_drafts_and_bad_shapes() -> None:
    r = parse_reply(reply(draft=None))
    assert (r.draft_n, r.draft_accepted) == (0, 0)
    for bad in ([], {"choices": []}, {"choices": [{"message": {"content": "x"}}]},
                {"choices": [{"message": {"content": "x"}}], "timings": {"predicted_n": "many"}}):
        with pytest.raises((BadReply, ServerError)):
            parse_reply(bad)


# ---- references ---------------------------------------------------------------------------------
def test_first_divergence_positions() -> None:
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abcdef", "abXdef") == 2
    assert first_divergence("abc", "abcd") == 3
    assert first_divergence("", "x") == 0


@given(st.text(max_size=50), st.text(max_size=50), st.text(min_size=1, max_size=5))
def test_first_divergence_is_the_common_prefix_length(prefix: str, a: str, b: str) -> None:
    x, y = prefix + a, prefix + b
    pos = first_divergence(x, y)
    if x == y:
        assert pos is None
    else:
        assert pos is not None and pos >= len(prefix) and x[:pos] == y[:pos]
        assert pos == min(len(x), len(y)) or x[pos] != y[pos]


def test_reference_set_reports_drift_window() -> None:
    refs = ReferenceSet()
    refs.record("t", "The quick brown fox jumps over the lazy dog")
    assert refs.check("t", "The quick brown fox jumps over the lazy dog", 1.0, 5) is None
    d = refs.check("t", "The quick brown cat jumps", 2.0, 6)
    assert d is not None and d.position == 16 and d.seq == 6
    assert (d.expected, d.got) == ("The quick brown fox jumps over the lazy dog", "The quick brown cat jumps")
    long = "x" * 100 + "abc" + "y" * 100
    d2 = refs.check("t", "x" * 100 + "abd", 3.0, 7) if refs.record("t", long) is None else None
    assert d2 is not None and d2.position == 102
    assert d2.expected == "x" * 18 + "abc" + "y" * 39 and d2.got == "x" * 18 + "abd"
    assert refs.checks == 3 and refs.drifts == [d, d2]


# ---- RSS trend ----------------------------------------------------------------------------------
def test_slope_of_a_line_in_mb_per_hour() -> None:
    pts = [(t, 100.0 + t / 60.0) for t in range(0, 3600, 30)]  # +1 MB per minute
    assert slope_per_hour(pts) == pytest.approx(60.0)
    assert slope_per_hour([(1.0, 5.0)]) is None
    assert slope_per_hour([(1.0, 5.0), (1.0, 6.0)]) is None


def test_rss_segments_split_on_restart_and_judge_the_longest_after_warmup() -> None:
    mb = 1024 * 1024
    samples = [RssSample(t, 1, (500 + (200 if t < 60 else 0) + t // 60) * mb) for t in range(0, 1200, 10)]
    samples += [RssSample(t, 2, 300 * mb) for t in range(1200, 1300, 10)]
    segs = segments(samples)
    assert [(s.pid, s.samples) for s in segs] == [(1, 120), (2, 10)]
    summary = summarize(samples, warmup=60.0)
    judged = summary["judged"]
    assert judged["pid"] == 1 and judged["start"] == 60.0
    assert judged["slope_mb_per_hour"] == pytest.approx(60.0, rel=0.05)
    assert summarize([])["judged"] is None


# ---- per-minute series --------------------------------------------------------------------------
def test_buckets_count_where_requests_end() -> None:
    ok = RequestRecord(0, "load", "a", [Attempt(10, 50, True)], predicted_n=40, predicted_ms=2000,
                       draft_n=30, draft_accepted=15)
    retried = RequestRecord(1, "load", "b", [Attempt(55, 58, False, "connect", "x"), Attempt(60, 70, True)],
                            predicted_n=10, predicted_ms=1000, draft_n=10, draft_accepted=10)
    failed = RequestRecord(2, "load", "c", [Attempt(100, 130, False, "timeout", "x")])
    for r in (ok, retried, failed):
        r.finish()
    b = build([ok, retried, failed], duration=150.0, fault_times=[56.0])
    assert len(b) == 3
    assert (b[0].requests_ok, b[0].attempt_errors, b[0].faults) == (1, 1, 1)
    assert b[0].decode_tps == pytest.approx(20.0) and b[0].acceptance == pytest.approx(0.5)
    assert (b[1].requests_ok, b[1].decode_tps, b[1].acceptance) == (1, pytest.approx(10.0), 1.0)
    assert (b[2].requests_ok, b[2].attempt_errors, b[2].decode_tps, b[2].acceptance) == (0, 1, None, None)


def test_anonymous_memory_trend_ignores_samples_without_it() -> None:
    mb = 1024 * 1024
    # RSS grows (weights paging in) while anonymous memory stays flat: only RSS has a slope
    samples = [RssSample(t, 1, (2000 + t // 10) * mb, 900 * mb) for t in range(0, 1200, 10)]
    samples.append(RssSample(1200, 1, 2200 * mb, None))
    rss, anon = summarize(samples), summarize(samples, attr="anon_bytes")
    assert rss["judged"]["slope_mb_per_hour"] == pytest.approx(360.0, rel=0.05)
    assert anon["series"] == "anon_bytes" and anon["judged"]["samples"] == 120
    assert anon["judged"]["slope_mb_per_hour"] == pytest.approx(0.0, abs=1e-6)
    assert summarize([RssSample(0, 1, mb)], attr="anon_bytes")["judged"] is None
