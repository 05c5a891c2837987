"""Issue 13, "the watch tells the truth": what the exporter *says* about a misbehaving llama-server.

Each test reproduces one report of the issue (numbered as there) against a stand-in server: the in-process
:class:`FakeFetcher` with a fake clock where time matters, the real HTTP :class:`FaultServer` where the
exporter's threads and HTTP side are part of the claim.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from specops.exporter.app import Exporter
from specops.exporter.collector import SpecopsCollector
from specops.exporter.config import ExporterConfig
from specops.exporter.slots import ShapeError, summarize_slots
from specops.exporter.state import Scraper, Snapshot
from specops.server import free_port
from tests.unit.fake_llama_fetcher import (
    ACCEPTED,
    CAP,
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
from tests.unit.test_exporter_faults import FaultServer, Reply

INFO = "llamacpp_server_info"  # the family name as the text parser reads it back


def families(text: str) -> dict[str, list[Sample]]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def exposition(scraper: Scraper) -> dict[str, list[Sample]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecopsCollector(scraper))
    return families(generate_latest(registry).decode())


def value(fams: dict[str, list[Sample]], name: str) -> float | None:
    samples = fams.get(name)
    return samples[0].value if samples else None


def errors(scraper: Scraper) -> dict[tuple[str, str], int]:
    return {k: v for k, v in scraper.selfm.copy()[0].items() if v}


@dataclass
class Growing:
    """A /metrics body whose counters grow on every request, as under steady traffic."""

    n: int = 0

    def body(self) -> bytes:
        self.n += 1
        n = self.n
        return metrics_body({DRAFT_TOKENS: 862 + 10 * n, ACCEPTED: 835 + 8 * n, DRAFTS: 108 + 2 * n,
                             PREDICTED: 957 + 12 * n, PREDICTED_SECONDS: 20 + 0.25 * n})

    def answer(self) -> Answer:
        return Answer(body=self.body())

    def reply(self) -> Reply:
        return Reply(body=self.body())


# ---- (1) ratios from one consistent snapshot per pass -------------------------------------------------------

def spec_body(accepted: float | str, drafted: float | str, drafts: float | str = 100.0,
              predicted: float = 957.0, seconds: float = 20.0) -> bytes:
    return metrics_body({ACCEPTED: accepted, DRAFT_TOKENS: drafted, DRAFTS: drafts, PREDICTED: predicted,
                         PREDICTED_SECONDS: seconds})


def assert_figures_sane(snap: Snapshot, fams: dict[str, list[Sample]] | None = None) -> None:
    w = snap.window
    assert w.acceptance_ratio is None or 0.0 <= w.acceptance_ratio <= 1.0, w
    assert w.mean_acceptance_length is None or w.mean_acceptance_length >= 1.0, w
    assert w.decode_tokens_per_second is None or w.decode_tokens_per_second >= 0.0, w
    assert all(0.0 <= r <= 1.0 for r in w.acceptance_by_position.values()), w
    if fams is not None:
        for s in (*fams.get("llamacpp_spec_acceptance_ratio", []),
                  *fams.get("llamacpp_spec_acceptance_by_position_ratio", [])):
            assert 0.0 <= s.value <= 1.0, s


def test_ratio_stays_in_0_1_when_an_invalid_pass_follows_a_counter_reset():
    """The issue's 278.3 = 835/3: the accepted counter went down (counted as a reset) in a pass whose draft
    counter was NaN; the old window skipped that pass for one counter and not the other."""
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock)
    bodies = [spec_body(1000, 1000), spec_body(835, "NaN"), spec_body(835, 3), spec_body(835, 6)]
    snaps = []
    for body in bodies:
        f.routes["/metrics"] = Answer(body=body)
        snaps.append(s.scrape_once())
        assert_figures_sane(snaps[-1], exposition(s))
        clock.advance(5)
    # the invalid pass restarts the window for every counter: nothing until two good passes follow it
    assert snaps[1].window.acceptance_ratio is None and snaps[2].window.acceptance_ratio is None
    assert snaps[3].window.acceptance_ratio == 0.0  # 0 accepted of 3 drafted since the restart


# A sequence of passes against a server model: what the exporter must say after each pass.
KINDS_BAD = ("nan", "missing", "down", "cut", "dup")
KINDS = ("good", "liar", "reset", *KINDS_BAD)


@dataclass
class ServerModel:
    values: dict[str, float] = field(default_factory=lambda: {ACCEPTED: 835.0, DRAFT_TOKENS: 862.0,
                                                              DRAFTS: 108.0, PREDICTED: 957.0,
                                                              PREDICTED_SECONDS: 20.0})
    segment: list[dict[str, float]] = field(default_factory=list)  # good passes since the window restarted
    # Issue 29: a liar (accepted rising faster than drafted) is refused once the exporter has a pass to compare
    # it with, and no window may end at it nor span it; after a reset the exporter may also restart its window
    # where counters reach their level from before the reset (a jump back, as far as it can tell), so from the
    # first reset on its figure must be that of *some* window of consistent passes: a suffix of ``truth``.
    truth: list[dict[str, float]] = field(default_factory=list)  # consistent passes (a liar only as a baseline)
    seen: bool = False  # the exporter has read a pass whole before
    reset_seen: bool = False

    def step(self, kind: str, a: int, d: int, which: str, f: FakeFetcher) -> None:
        body = self._body(kind, a, d, which)
        f.routes["/metrics"] = down("/metrics") if kind == "down" else Answer(body=body)
        f.routes["/health"] = down("/health") if kind == "down" else Answer(body=b'{"status":"ok"}')

    def _body(self, kind: str, a: int, d: int, which: str) -> bytes:
        v = self.values
        if kind in ("good", "liar", "reset"):
            if kind == "reset":  # a restarted server: every counter small again
                v.update({ACCEPTED: float(min(a, d)), DRAFT_TOKENS: float(d), DRAFTS: float(d // 4),
                          PREDICTED: float(d + 1), PREDICTED_SECONDS: 0.5})
                self.reset_seen = True
            else:
                v[ACCEPTED] += (a + d + 1) if kind == "liar" else min(a, d)
                v[DRAFT_TOKENS] += d
                v[DRAFTS] += (d + 3) // 4  # a verification step checks 1 to 4 drafted tokens here
                v[PREDICTED] += d + 1
                v[PREDICTED_SECONDS] += 0.5
            went_down = bool(self.truth) and any(v[k] < self.truth[-1][k] for k in v)
            if kind == "liar":
                self.segment = [] if self.seen else [dict(v)]
                self.truth = [dict(v)]
            else:
                if self.segment and any(v[k] < self.segment[-1][k] for k in v):
                    self.segment = []
                self.segment.append(dict(v))
                self.truth = [*([] if went_down else self.truth), dict(v)]
            self.seen = True
            return metrics_body(v)
        self.segment = []
        self.truth = []
        if kind == "nan":
            return metrics_body({**v, which: "NaN"})
        if kind == "missing":
            return metrics_body({**v, which: None})
        if kind == "cut":
            return metrics_body(v)[:-7]
        if kind == "dup":
            body = metrics_body(v).decode()
            return "".join(line + "\n" + (line + "\n" if not line.startswith("#") else "")
                           for line in body.splitlines()).encode()
        return b""  # down: not served

    @staticmethod
    def ratio(window: list[dict[str, float]]) -> float | None:
        if len(window) < 2:
            return None
        da = window[-1][ACCEPTED] - window[0][ACCEPTED]
        dd = window[-1][DRAFT_TOKENS] - window[0][DRAFT_TOKENS]
        return None if dd <= 0 else min(1.0, da / dd)

    def expected_ratio(self) -> float | None:
        return self.ratio(self.segment)

    def possible_ratios(self) -> list[float]:
        """The figures of every window of consistent passes ending at this one (none after a liar)."""
        return [r for j in range(len(self.truth) - 1) if (r := self.ratio(self.truth[j:])) is not None]


def run_passes(steps: list[tuple[str, int, int, str]], check_exposition: bool = True) -> None:
    f = FakeFetcher()
    clock = FakeClock()
    s = fake_scraper(f, clock, window=1e6)
    model = ServerModel()
    for i, (kind, a, d, which) in enumerate(steps):
        model.step(kind, a, d, which, f)
        snap = s.scrape_once()
        assert_figures_sane(snap, exposition(s) if check_exposition else None)
        got = snap.window.acceptance_ratio
        if not model.reset_seen:
            expected = model.expected_ratio()
            assert (got is None) == (expected is None), (i, steps[: i + 1], got, expected)
            assert got is None or expected is None or math.isclose(got, expected), (i, steps[: i + 1], got, expected)
        else:
            possible = model.possible_ratios()
            assert got is None or any(math.isclose(got, r) for r in possible), (i, steps[: i + 1], got, possible)
        if kind in (*KINDS_BAD, "liar"):
            assert snap.window == type(snap.window)(), (i, steps[: i + 1], snap.window)
        clock.advance(5)


def test_every_ordering_of_valid_invalid_and_reset_passes():
    """Exhaustive over five passes: each one valid (counters grow), invalid (a spec counter NaN) or a reset."""
    kinds = {"valid": ("good", 3, 5, ACCEPTED), "invalid": ("nan", 0, 0, DRAFT_TOKENS),
             "reset": ("reset", 1, 2, ACCEPTED)}
    for order in itertools.product(kinds, repeat=5):
        run_passes([kinds[k] for k in order], check_exposition=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 40), st.integers(0, 40),
                          st.sampled_from([ACCEPTED, DRAFT_TOKENS, DRAFTS])), min_size=1, max_size=10))
def test_any_sequence_of_passes_gives_ratios_in_0_1_from_consistent_windows(steps):
    run_passes(steps)


# ---- (2) no stale numbers -----------------------------------------------------------------------------------

def test_derived_gauges_need_two_good_passes_within_twice_the_window():
    f = FakeFetcher()
    growing = Growing()
    f.routes["/metrics"] = growing.answer
    clock = FakeClock()
    s = fake_scraper(f, clock, window=10)
    s.scrape_once()
    clock.advance(1)
    assert s.scrape_once().window.acceptance_ratio is not None
    clock.advance(30)  # the exporter was stalled: the previous good pass is older than 2 x window
    snap = s.scrape_once()
    assert snap.window.acceptance_ratio is None and not any(n in exposition(s) for n in DERIVED)
    clock.advance(1)
    assert s.scrape_once().window.acceptance_ratio is not None and "llamacpp_spec_acceptance_ratio" in exposition(s)
    clock.advance(25)  # no pass at all since: the figures are too old to show
    assert not any(n in exposition(s) for n in DERIVED)


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    server = FaultServer()
    yield server
    server.close()


def test_derived_gauges_vanish_during_http_500s_and_after_the_server_is_killed(fault_server):
    growing = Growing()
    fault_server.routes["/metrics"] = growing.reply
    port = free_port()
    exp = Exporter(ExporterConfig(server_url=fault_server.url, listen_port=port, interval=0.2, timeout=0.3,
                                  pid_from_port=False, nvidia_smi="off"))
    exp.start()
    url = f"http://127.0.0.1:{port}/metrics"

    def wait_for(pred: Callable[[dict[str, list[Sample]]], bool], what: str) -> dict[str, list[Sample]]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            fams = families(httpx.get(url, timeout=5).text)
            if pred(fams):
                return fams
            time.sleep(0.05)
        raise AssertionError(f"not reached within 30 s: {what}")

    def cycles(fams: dict[str, list[Sample]]) -> float:
        return value(fams, "specops_exporter_scrape_cycles") or 0.0

    def all_derived(fams: dict[str, list[Sample]]) -> bool:
        return value(fams, "llamacpp_up") == 1 and all(n in fams for n in DERIVED)

    try:
        wait_for(all_derived, "derived gauges while the server answers")
        for outage in ("http 500", "server killed"):
            if outage == "http 500":
                fault_server.routes["/metrics"] = Reply(500, b"boom")
            else:
                fault_server.close()
            fams = wait_for(lambda f: value(f, "llamacpp_up") == 0, f"up == 0 ({outage})")
            assert not [n for n in DERIVED if n in fams], outage
            last_success = value(fams, "llamacpp_exporter_last_success_timestamp_seconds")
            assert last_success is not None and last_success <= time.time()
            later = cycles(fams) + 3
            fams = wait_for(lambda f, later=later: cycles(f) >= later, f"three more passes ({outage})")
            assert value(fams, "llamacpp_up") == 0 and not [n for n in DERIVED if n in fams], outage
            assert value(fams, "llamacpp_exporter_last_success_timestamp_seconds") == last_success
            if outage == "http 500":
                fault_server.routes["/metrics"] = growing.reply
                fams = wait_for(all_derived, "derived gauges again after the 500s")
                assert value(fams, "llamacpp_exporter_last_success_timestamp_seconds") > last_success
    finally:
        exp.shutdown()


# ---- (3) speculation: on / off / unknown --------------------------------------------------------------------

def info_labels(fams: dict[str, list[Sample]]) -> dict[str, str]:
    samples = fams[INFO]
    assert len(samples) == 1
    return samples[0].labels


def test_a_slots_failure_neither_turns_speculation_off_nor_changes_the_info_series():
    f = FakeFetcher()
    s = fake_scraper(f)
    s.scrape_once()
    first = exposition(s)
    assert value(first, "llamacpp_speculation_expected") == 1
    labels = info_labels(first)
    for broken in ({"/slots": Answer(500)}, {"/slots": Answer(body=b"[]")},
                   {"/slots": down(), "/metrics": down(), "/health": down()}):
        f.routes.update(broken)
        s.scrape_once()
        fams = exposition(s)
        assert value(fams, "llamacpp_speculation_expected") == 1, broken
        assert value(fams, "llamacpp_speculation_state_known") == 1, broken
        assert info_labels(fams) == labels, broken


def test_unknown_speculation_is_not_exported_as_off():
    f = FakeFetcher()
    f.routes["/slots"] = Answer(500)
    s = fake_scraper(f)  # no command line either (no PID source)
    s.scrape_once()
    fams = exposition(s)
    assert "llamacpp_speculation_expected" not in fams  # neither 1 nor 0: not known
    assert value(fams, "llamacpp_speculation_state_known") == 0
    known = FakeFetcher()
    k = fake_scraper(known)
    k.scrape_once()
    labels, known_labels = info_labels(fams), info_labels(exposition(k))
    assert labels.keys() == known_labels.keys() and labels["spec_type"] == "unknown"
    # /slots answers later: the state becomes known
    f.routes["/slots"] = Answer(body=(CAP / "base_slots.json").read_bytes())
    s.scrape_once()
    fams = exposition(s)
    assert value(fams, "llamacpp_speculation_expected") == 0 and value(fams, "llamacpp_speculation_state_known") == 1


# ---- (5) /slots by schema, flapping logged once a minute ----------------------------------------------------

SLOT = {"id": 0, "is_processing": False, "speculative": True, "params": {"speculative.types": "draft-simple"}}


@pytest.mark.parametrize("payload", [
    [],
    [{**SLOT, "id": "zero"}],
    [{**SLOT, "speculative": "yes"}],
    [{**SLOT, "is_processing": 1}],
    [{**SLOT, "id": True}],
    [{**SLOT, "id": -1}],
    [{**SLOT, "params": []}],
    [{**SLOT, "params": {"speculative.types": 5}}],
    [{k: v for k, v in SLOT.items() if k != "id"}],
    [SLOT, {**SLOT, "id": 1, "speculative": None}],
    [SLOT, 7],
])
def test_slots_schema_rejects_wrong_types_and_an_empty_list(payload):
    with pytest.raises(ShapeError):
        summarize_slots(payload)


def test_slots_schema_accepts_what_servers_send():
    assert summarize_slots([SLOT, {**SLOT, "id": 1, "is_processing": True}]).busy == 1
    old = [{"id": 0, "is_processing": False}]  # builds without the speculative fields
    assert summarize_slots(old).total == 1


def test_an_empty_slots_list_is_a_shape_error():
    f = FakeFetcher()
    f.routes["/slots"] = Answer(body=b"[]")
    s = fake_scraper(f)
    s.scrape_once()
    assert errors(s) == {("slots", "shape"): 1}


def test_flapping_slots_are_logged_at_most_once_a_minute_with_a_count(caplog):
    f = FakeFetcher()
    good = (CAP / "spec_slots.json").read_bytes()
    flip = itertools.cycle([Answer(body=b'{"slots": []}'), Answer(body=good)])
    f.routes["/slots"] = lambda: next(flip)
    clock = FakeClock()
    s = fake_scraper(f, clock)
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        for _ in range(180):  # three minutes, one pass a second
            s.scrape_once()
            clock.advance(1)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slots:")]
    assert errors(s)[("slots", "shape")] == 90  # every failure still counted
    assert 2 <= len(lines) <= 2 + 3, lines  # the first failure and recovery, then one line a minute at most
    assert any("changes" in line and any(c.isdigit() for c in line) for line in lines[2:]), lines


# ---- (6) a cut or duplicated /metrics body --------------------------------------------------------------------

def every_sample_twice(text: str) -> str:
    return "".join(line + "\n" + ("" if line.startswith("#") else line + "\n") for line in text.splitlines())


CUT_MID_LINE = SPEC_METRICS[: SPEC_METRICS.index("llamacpp:n_decode_total 122") + len("llamacpp:n_decode_total 1")]
CUT_AFTER_TYPE = SPEC_METRICS[: SPEC_METRICS.index("llamacpp:n_decode_total 122")]


@pytest.mark.parametrize("body", [CUT_MID_LINE, CUT_AFTER_TYPE, every_sample_twice(SPEC_METRICS),
                                  SPEC_METRICS + SPEC_METRICS],
                         ids=["cut-mid-line", "cut-after-type", "every-sample-twice", "body-twice"])
def test_a_cut_or_duplicated_metrics_body_is_invalid_and_down(body):
    f = FakeFetcher()
    f.routes["/metrics"] = Answer(body=body.encode())
    s = fake_scraper(f)
    snap = s.scrape_once()
    assert errors(s) == {("metrics", "invalid"): 1}
    assert not snap.up and value(exposition(s), "llamacpp_up") == 0


def test_a_cut_body_over_http_is_invalid(fault_server):
    fault_server.routes["/metrics"] = Reply(body=CUT_MID_LINE.encode())  # Content-Length matches the cut body
    s = Scraper(ExporterConfig(server_url=fault_server.url, timeout=0.5, pid_from_port=False, nvidia_smi="off"))
    try:
        assert not s.scrape_once().up
        assert errors(s) == {("metrics", "invalid"): 1}
    finally:
        s.close()


def test_garbage_lines_in_a_complete_body_stay_a_parse_error():
    f = FakeFetcher()
    f.routes["/metrics"] = Answer(body=SPEC_METRICS.encode() + b"}}}garbage\n")
    s = fake_scraper(f)
    assert s.scrape_once().up and errors(s) == {("metrics", "parse"): 1}
