"""Issue 29, the exporter's last wrong values: counters that contradict each other are refused (not clamped), a
decrease and the jump back after it never count as traffic, and the log shows every outage and every new error.

Against the in-process stand-in server (:class:`FakeFetcher`) with a fake clock, as the issue-13 tests are.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from specops.exporter.collector import SpecopsCollector
from specops.exporter.derived import WindowFigures, contradiction, positions_disagree, printed_error
from specops.exporter.state import Scraper
from specops.exporter.window import CounterWindow
from tests.unit.fake_llama_fetcher import (
    ACCEPTED,
    DERIVED,
    DRAFT_TOKENS,
    DRAFTS,
    PREDICTED,
    PREDICTED_SECONDS,
    SPEC_METRICS,
    Answer,
    FakeClock,
    FakeFetcher,
    down,
    fake_scraper,
    metrics_body,
)

POS = 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="%d"}'
ALL_DOWN = ("/health", "/metrics", "/slots", "/props")


def exported(scraper: Scraper) -> set[str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecopsCollector(scraper))
    return {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}


def errors(scraper: Scraper) -> dict[tuple[str, str], int]:
    return {k: v for k, v in scraper.selfm.copy()[0].items() if v}


def counters(n: float, acc: float = 8, drafted: float = 10, steps: float = 2, tokens: float = 25,
             seconds: float = 0.5) -> dict[str, float]:
    """The spec capture's counters after ``n`` passes of steady traffic (by default: acceptance 0.8, mean
    length 5, 50 tokens/s)."""
    return {ACCEPTED: 835 + acc * n, DRAFT_TOKENS: 862 + drafted * n, DRAFTS: 108 + steps * n,
            PREDICTED: 957 + tokens * n, PREDICTED_SECONDS: 20 + seconds * n}


def serve(f: FakeFetcher, values: Mapping[str, float | str | None]) -> None:
    f.routes["/metrics"] = Answer(body=metrics_body(values))


# ---- (1) impossible counters are refused, not hidden ----------------------------------------------------------

def test_accepted_rising_faster_than_drafted_is_refused_and_counted():
    """The issue's report: accepted +20, drafted +10 a pass gave acceptance 1.0 (clamped), mean length 11.4 and
    no error."""
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    for n in range(6):
        serve(f, counters(n, acc=20, drafted=10))
        snap = s.scrape_once()
        assert snap.window == WindowFigures(), (n, snap.window)
        assert not set(DERIVED) & exported(s), n
        clock.advance(5)
    assert errors(s) == {("metrics", "invalid_value"): 5}  # every pass that has one before it to contradict
    assert snap.up  # read whole: the server is up, its counters are just not believed


BASE_POS = {0: 108, 1: 105, 2: 104, 3: 104, 4: 104, 5: 104, 6: 104, 7: 102}  # the spec capture's


def positions(n: float) -> dict[str, float]:
    """The per-position counters of :func:`counters`: each of its 2 steps a pass accepts 4 tokens, at positions 0
    to 3 (so they add up to the accepted total, as a server's do)."""
    return {POS % p: float(v) + (2 * n if p < 4 else 0) for p, v in BASE_POS.items()}


@pytest.mark.parametrize(("why", "lie"), [  # added to the counters from the second pass on
    ("accepted tokens rose by 20 but drafted tokens only by 10", {ACCEPTED: 12}),
    ("verification steps rose by 11 but drafted tokens only by 10", {DRAFTS: 9}),
    ("accepted tokens rose by 8 without a verification step", {DRAFTS: -2}),
    ("draft position 0 accepted 3 times in 2 verification steps", {POS % 0: 1}),
    ("accepted tokens by position rose by 9 but accepted tokens by 8", {POS % 4: 1}),
])
def test_each_contradiction_is_refused_counted_logged_and_the_window_restarts_without_it(why, lie, caplog):
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)

    def lying(n: int) -> dict[str, float]:
        base = {**counters(n), **positions(n)}
        return {k: v + lie.get(k, 0) for k, v in base.items()}

    serve(f, counters(0))
    s.scrape_once()
    clock.advance(5)
    serve(f, lying(1))
    with caplog.at_level(logging.WARNING, logger="specops.exporter"):
        snap = s.scrape_once()
    assert snap.window == WindowFigures() and errors(s) == {("metrics", "invalid_value"): 1}
    assert caplog.messages == [f"metrics: invalid_value: /metrics: counters contradict each other: {why}"]
    clock.advance(5)
    # the pass after a refused one is not differenced against it: two consistent passes are needed again
    serve(f, lying(2))
    assert s.scrape_once().window == WindowFigures()
    clock.advance(5)
    serve(f, lying(3))
    w = s.scrape_once().window
    assert w.acceptance_ratio == 0.8 and w.mean_acceptance_length == 5.0 and w.decode_tokens_per_second == 50.0
    assert errors(s) == {("metrics", "invalid_value"): 1}


def test_contradiction_rules():
    before = {ACC: 100.0, DT: 200.0, ST: 50.0, "pos0": 40.0, "pos1": 30.0}
    assert contradiction(before, {ACC: 108.0, DT: 210.0, ST: 52.0, "pos0": 42.0, "pos1": 32.0}, "metrics") is None
    assert contradiction(before, {**before, ACC: 111.0, DT: 210.0}, "metrics")  # accepted > drafted
    assert contradiction(before, {**before, ACC: 111.0, DT: 210.0}, "log")  # from the log too
    assert contradiction(before, {**before, ST: 61.0, DT: 210.0}, "metrics")  # steps > drafted
    assert contradiction(before, {**before, ST: 61.0, DT: 210.0}, "log") is None  # the log's steps are rounded
    assert contradiction(before, {**before, ACC: 104.0, DT: 210.0}, "metrics")  # accepted without a step
    assert contradiction(before, {ACC: 108.0, DT: 210.0, ST: 52.0, "pos0": 43.0}, "metrics")  # pos0 > steps
    assert contradiction(before, {ACC: 103.0, DT: 210.0, ST: 52.0, "pos0": 42.0, "pos1": 32.0}, "metrics")  # sum
    assert contradiction(before, {ACC: 108.0, DT: 210.0, ST: 52.0, "pos0": 42.0, "pos1": 32.0, "pos2": 2.0},
                         "metrics") is None  # a position appearing at its first increment counts from zero
    assert contradiction({ACC: 1.0, DT: 1.0}, {ACC: 5.0, DT: 5.0}, "metrics") is None  # TabbyAPI: no steps


ACC, DT, ST = "llamacpp_spec_accepted_tokens_total", "llamacpp_spec_draft_tokens_total", "llamacpp_spec_drafts_total"


# ---- (1b) per-position figures agree with the total (issue 51) ------------------------------------------------

BY_POSITION = "llamacpp_spec_acceptance_by_position_ratio"


@pytest.mark.parametrize(("why", "pos"), [
    ("accepted tokens by position rose by 0 but accepted tokens by 8", lambda n: 0),  # they stand still
    ("accepted tokens by position rose by 4 but accepted tokens by 8", lambda n: n),  # half of them counted
])
def test_per_position_counters_that_do_not_add_up_are_withdrawn_counted_and_logged_once(why, pos, caplog):
    """The issue's case: per-position ratios of 0.0 beside an acceptance of 0.8 and no error. Now the total's figures
    stand, the per-position ratios are withdrawn, every pass counts invalid_value, and the log says it once."""
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock, window=10)

    def lying(n: int) -> dict[str, float]:  # positions 0 to 3 rise by pos(n) (a server's by 2 n)
        return {POS % p: float(v) + (pos(n) if p < 4 else 0) for p, v in BASE_POS.items()}

    def agreeing(n: int) -> dict[str, float]:  # from the lie's last levels on, rising as a server's do
        return {POS % p: v + (2 * (n - 2) if p < 4 else 0) for p, v in enumerate(lying(2).values())}

    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        for n in range(3):
            serve(f, {**counters(n), **lying(n)})
            w = s.scrape_once().window
            clock.advance(5)
        assert (w.acceptance_ratio, w.mean_acceptance_length, w.decode_tokens_per_second) == (0.8, 5.0, 50.0)
        assert w.acceptance_by_position == {} and BY_POSITION not in exported(s)
        assert "llamacpp_spec_acceptance_ratio" in exported(s)
        assert errors(s) == {("metrics", "invalid_value"): 2}  # the two passes with a window
        for n in range(3, 6):  # the server's counters agree again: once the window holds only those, so do we
            serve(f, {**counters(n), **agreeing(n)})
            w = s.scrape_once().window
            clock.advance(5)
    assert errors(s) == {("metrics", "invalid_value"): 3}  # the window of the first of them still held a lie
    assert w.acceptance_by_position == {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.0}
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics:")]
    assert lines == [f"metrics: invalid_value: /metrics: counters contradict each other: {why} over the window: "
                     "per-position acceptance withdrawn", "metrics: ok again after 15.0 s (was invalid_value)"]


def window_of(*passes: dict[str, float]) -> CounterWindow:
    w = CounterWindow(1e6)
    for t, values in enumerate(passes):
        w.observe(float(t), values, "metrics")
    return w


def test_positions_agree_with_the_total_within_the_printing_only():
    both = {ACC: 100.0, "pos0": 60.0, "pos1": 40.0}
    assert positions_disagree(window_of(both, {ACC: 108.0, "pos0": 64.0, "pos1": 44.0}), ["pos0", "pos1"]) is None
    assert positions_disagree(window_of(both, {ACC: 108.0, "pos0": 64.0, "pos1": 45.0}), ["pos0", "pos1"])  # 9 ≠ 8
    assert positions_disagree(window_of(both, {ACC: 108.0, "pos0": 64.0, "pos1": 43.0}), ["pos0", "pos1"])  # 7 ≠ 8
    assert positions_disagree(window_of(both, {ACC: 100.0, "pos0": 60.0, "pos1": 40.0}), ["pos0", "pos1"]) is None
    assert positions_disagree(window_of(both), ["pos0", "pos1"]) is None  # one pass: nothing to compare
    assert positions_disagree(window_of({ACC: 1.0}, {ACC: 5.0}), []) is None  # a build without the series
    # llama-server prints six significant digits: 1234567 reads 1.23457e+06, up to 5 tokens off
    assert printed_error(999_999) == 0.0 and printed_error(1_234_570) == 5.0 and printed_error(12_345_700) == 50.0
    big = {ACC: 1.23457e6, "pos0": 400_000.0, "pos1": 834_570.0}
    later = {ACC: 1.23458e6, "pos0": 400_004.0, "pos1": 834_574.0}  # 8 accepted, printed as 10 more
    assert positions_disagree(window_of(big, later), ["pos0", "pos1"]) is None
    frozen = {ACC: 1.23462e6, "pos0": 400_000.0, "pos1": 834_570.0}  # 50 more, positions still: beyond rounding
    assert positions_disagree(window_of(big, frozen), ["pos0", "pos1"])


def test_nan_or_negative_counters_are_invalid_values_and_give_no_figure():
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    for n, bad in enumerate(["NaN", "-5", "+Inf"]):
        serve(f, counters(2 * n))
        s.scrape_once()
        clock.advance(5)
        serve(f, {**counters(2 * n + 1), DRAFT_TOKENS: bad})
        assert s.scrape_once().window == WindowFigures(), bad
        clock.advance(5)
    assert errors(s) == {("metrics", "invalid_value"): 3}


# ---- (2) a decrease and the jump back after it are not traffic --------------------------------------------------

SERVER_B = {ACCEPTED: 100, DRAFT_TOKENS: 125, DRAFTS: 25, PREDICTED: 300, PREDICTED_SECONDS: 5}


def test_a_counter_drop_and_the_jump_back_are_not_traffic():
    """The issue's report: counters down, then back to their old level (a proxy flapping between two servers)
    gave acceptance 0.897, mean length 11.5 and 124 tokens/s for one window; the truth was 0.80, 5 and 50."""
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    figures = []
    for values in (counters(0), counters(1), SERVER_B, counters(3), counters(4), counters(5)):
        serve(f, values)
        figures.append(s.scrape_once().window)
        clock.advance(5)
    assert figures[1].acceptance_ratio == 0.8
    assert figures[2] == WindowFigures()  # the drop: its pass is the new baseline, no figure yet
    assert figures[3] == WindowFigures()  # the jump back: not differenced against the drop, nor the pass before it
    for w in figures[4:]:
        assert (w.acceptance_ratio, w.mean_acceptance_length, w.decode_tokens_per_second) == (0.8, 5.0, 50.0)
    assert not errors(s)  # a flap is not an invalid value


def test_a_restarted_server_replaced_by_the_old_one_through_a_bad_pass():
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    restarted_later = {ACCEPTED: 104, DRAFT_TOKENS: 130, DRAFTS: 26, PREDICTED: 310, PREDICTED_SECONDS: 5.5}
    for values in (counters(0), counters(1), {**SERVER_B, DRAFTS: "NaN"}, SERVER_B, restarted_later):
        serve(f, values)
        w = s.scrape_once().window
        clock.advance(5)
    # the restarted server's own traffic: 4 of 5 drafted tokens in 1 step, 10 tokens in 0.5 s
    assert (w.acceptance_ratio, w.mean_acceptance_length, w.decode_tokens_per_second) == (0.8, 5.0, 20.0)
    serve(f, counters(4))  # the old server is back: a jump, not a million tokens of traffic
    assert s.scrape_once().window == WindowFigures()
    clock.advance(5)
    serve(f, counters(5))
    assert s.scrape_once().window.decode_tokens_per_second == 50.0


# ---- (3) the log shows outages and every error kind -----------------------------------------------------------

def every_sample_twice(text: str) -> str:
    return "".join(line + "\n" + ("" if line.startswith("#") else line + "\n") for line in text.splitlines())


FAULTS = [  # (what the issue calls it, body, the log line's start)
    ("garbage", SPEC_METRICS.encode() + b"}}}garbage\n", "metrics: parse: /metrics: 1 unparseable line(s)"),
    ("NaN", metrics_body({DRAFT_TOKENS: "NaN"}), "metrics: invalid_value: /metrics: 1 NaN, infinite or negative"),
    ("empty", b"", "metrics: shape: /metrics: no llama.cpp series in ''"),
    ("duplicate series", every_sample_twice(SPEC_METRICS).encode(), "metrics: invalid: /metrics: "),
    ("HTML", b"<html><body><h1>502 Bad Gateway</h1></body></html>\n", "metrics: shape: /metrics: no llama.cpp "
     "series in '<html>"),
    ("bad UTF-8", b"\xff\xfe\xfd\n", "metrics: shape: /metrics: no llama.cpp series in '\ufffd"),
    ("negative", metrics_body({DRAFT_TOKENS: "-5"}), "metrics: invalid_value: /metrics: 1 NaN, infinite or "
     "negative value(s): llamacpp:spec_decode_num_draft_tokens_total -5.0"),
]


def test_every_error_kind_reaches_the_log_even_in_quick_succession(caplog):
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        s.scrape_once()
        for _, body, _ in FAULTS:  # one pass each, a good one between: within one minute
            clock.advance(1)
            f.routes["/metrics"] = Answer(body=body)
            s.scrape_once()
            clock.advance(1)
            f.routes["/metrics"] = Answer(body=SPEC_METRICS.encode())
            s.scrape_once()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics:")]
    for name, _, start in FAULTS:
        assert any(line.startswith(start) for line in lines), (name, lines)
    assert sum("ok again after 1.0 s" in line for line in lines) == len(FAULTS), lines


def test_http_500s_after_flapping_and_a_killed_server_are_logged_with_their_durations(caplog):
    """The issue's report: after two state changes in a minute, 30 s of HTTP 500 gave no line at all, and a
    killed server nothing until 'restarted'."""
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    good = dict(f.routes)
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        s.scrape_once()
        for _ in range(2):  # flapping first: two blips of the same error
            clock.advance(1)
            f.routes["/metrics"] = Answer(500, b"boom")
            s.scrape_once()
            clock.advance(1)
            f.routes["/metrics"] = good["/metrics"]
            s.scrape_once()
        start = len(caplog.records)
        f.routes["/metrics"] = Answer(500, b"boom")
        for _ in range(31):  # 30 s of HTTP 500, a pass a second
            clock.advance(1)
            s.scrape_once()
        clock.advance(1)
        f.routes["/metrics"] = good["/metrics"]
        s.scrape_once()
        outage = [r.getMessage() for r in caplog.records[start:] if r.getMessage().startswith("metrics:")]
        assert outage == ["metrics: http_5xx: GET /metrics: HTTP 500 (down for 10.0 s)",
                          "metrics: ok again after 31.0 s (was http_5xx)"]
        start = len(caplog.records)
        f.routes.update({path: down(path) for path in ALL_DOWN})  # killed
        for _ in range(20):
            clock.advance(1)
            s.scrape_once()
        clock.advance(1)
        f.routes.update(good)  # restarted
        s.scrape_once()
        killed = [r.getMessage() for r in caplog.records[start:]]
    for endpoint in ("health", "metrics"):
        ours = [line for line in killed if line.startswith(f"{endpoint}:")]
        assert len(ours) == 2 and ours[0].startswith(f"{endpoint}: connect: GET /{endpoint}"), killed
        assert ours[1] == f"{endpoint}: ok again after 20.0 s (was connect)", killed


def test_a_contradiction_is_logged_and_its_end_too(caplog):
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        for n in range(4):
            serve(f, counters(n, acc=20 if n in (1, 2) else 8))
            s.scrape_once()
            clock.advance(5)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics:")]
    assert lines == ["metrics: invalid_value: /metrics: counters contradict each other: accepted tokens rose by 20 "
                     "but drafted tokens only by 10", "metrics: ok again after 10.0 s (was invalid_value)"]


# ---- any sequence: no figure but the truth of one consistent window ----------------------------------------------

HIGH, LOW = 1_000_000.0, 10_000.0
KEYS = (ACCEPTED, DRAFT_TOKENS, DRAFTS, PREDICTED, PREDICTED_SECONDS)
KINDS = ("traffic", "traffic", "garbage", "switch", "restart", "liar", "steps_liar", "nan", "negative", "down")


def fresh(base: float) -> dict[str, float]:
    return {ACCEPTED: base, DRAFT_TOKENS: base * 1.25, DRAFTS: base / 4, PREDICTED: base * 1.5,
            PREDICTED_SECONDS: base / 100}


@dataclass
class Pass:
    server: int  # which server incarnation answered
    values: dict[str, float] | None  # None: not read whole and valid
    consistent: bool  # its counters follow the incarnation's previous ones (False: a liar)


@dataclass
class Proxy:
    """Two llama-servers behind a proxy that flaps between them: A with high counters, B with low ones (B never
    catches up with A in a test). B may restart (its counters start from zero again); A may not, and the first
    pass is A's, so every change of server is a decrease or a jump back to a level seen before it: visible."""

    servers: dict[str, dict[str, float]] = field(default_factory=lambda: {"A": fresh(HIGH), "B": fresh(LOW)})
    ids: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 1})
    current: str = "A"
    passes: list[Pass] = field(default_factory=list)

    def traffic(self, name: str, a: int, d: int) -> None:
        v = self.servers[name]
        v[ACCEPTED] += min(a, d)
        v[DRAFT_TOKENS] += d
        v[DRAFTS] += (d + 3) // 4
        v[PREDICTED] += d + 1
        v[PREDICTED_SECONDS] += 0.5

    def last_read(self) -> Pass | None:
        return next((p for p in reversed(self.passes) if p.values is not None), None)

    def step(self, kind: str, a: int, d: int) -> bytes | None:
        """The body for this pass (None: the server does not answer), after the traffic since the last one."""
        if kind == "switch":
            self.current = "B" if self.current == "A" else "A"
        if kind == "restart":  # a fresh server has served nothing yet: its counters are below any it replaces
            self.current, self.servers["B"], self.ids["B"] = "B", fresh(0.0), max(self.ids.values()) + 1
        else:
            self.traffic(self.current, a, d)
        v, me = self.servers[self.current], self.ids[self.current]
        last = self.last_read()
        same = last is not None and last.server == me and last.values is not None
        if kind == "liar":  # accepted rises by more than drafted since the last pass read
            base = last.values if same and last.values else v
            v[ACCEPTED] = max(v[ACCEPTED], base[ACCEPTED] + (v[DRAFT_TOKENS] - base[DRAFT_TOKENS]) + 1 + a)
        if kind == "steps_liar":  # verification steps rise by more than drafted tokens
            base = last.values if same and last.values else v
            v[DRAFTS] = max(v[DRAFTS], base[DRAFTS] + (v[DRAFT_TOKENS] - base[DRAFT_TOKENS]) + 1)
        valid = kind not in ("nan", "negative", "down")
        self.passes.append(Pass(me, dict(v) if valid else None, kind not in ("liar", "steps_liar")))
        if kind == "down":
            return None
        body = metrics_body({**v, ACCEPTED: "NaN"} if kind == "nan" else {**v, DRAFTS: -3.0}
                            if kind == "negative" else v)
        return body + b"}}}garbage\n" if kind == "garbage" else body

    def windows(self) -> list[tuple[float | None, float | None, float | None]]:
        """The figures of every window of consecutive passes of one server ending at the last pass, all read
        whole, none of them a liar but the first (a liar's counters are real levels, its increase is not)."""
        out = []
        end = self.passes[-1]
        if end.values is None or not end.consistent:
            return out
        for j in range(len(self.passes) - 2, -1, -1):
            p = self.passes[j]
            if p.server != end.server or p.values is None:
                break
            out.append(figures(p.values, end.values))
            if not p.consistent:
                break
        return out


def figures(a: dict[str, float], b: dict[str, float]) -> tuple[float | None, float | None, float | None]:
    acc, dt, st, pred, sec = (b[k] - a[k] for k in KEYS)
    return (acc / dt if dt > 0 else None, 1 + acc / st if st > 0 else None, pred / sec if sec > 0 else None)


def same(got: tuple[float | None, ...], want: tuple[float | None, ...]) -> bool:
    return all((g is None) == (w is None) and (g is None or w is None or math.isclose(g, w))
               for g, w in zip(got, want, strict=True))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 40), st.integers(0, 40)), max_size=30))
def test_no_figure_ever_differs_from_the_truth_of_one_consistent_window(steps):
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock, window=1e6)
    proxy = Proxy()
    for i, (kind, a, d) in enumerate([("traffic", 3, 5), *steps]):
        body = proxy.step(kind, a, d)
        f.routes["/metrics"] = down("/metrics") if body is None else Answer(body=body)
        w = s.scrape_once().window
        got = (w.acceptance_ratio, w.mean_acceptance_length, w.decode_tokens_per_second)
        if any(g is not None for g in got):  # a figure is exported: it must be the truth of some window
            truths = proxy.windows()
            assert any(same(got, t) for t in truths), (i, steps[:i], got, truths)
        # and no silence where the truth is plain: two consistent passes of one server give figures (except on a
        # server restarted twice: growing back to its level before the second restart is, to the counters, the
        # same as the old one coming back)
        prev, end = proxy.passes[-2:] if i else (None, proxy.passes[-1])
        if (kind in ("traffic", "garbage") and prev is not None and prev.values is not None and prev.consistent
                and prev.server == end.server and end.server <= 2):
            assert math.isfinite(w.valid_until), (i, steps[:i], "two consistent passes give figures")
        clock.advance(5)
