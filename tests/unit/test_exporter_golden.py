"""Golden expositions: the exporter's whole output for a set of llama-server states, compared with committed
files in tests/fixtures/exporter/golden/ (the prometheus-pve-exporter way: a change to the output is a
reviewed diff of those files).

Each state drives a scraper over :class:`FakeFetcher` with the real captures of
tests/fixtures/llama-server-0c1e57098 (or bodies constructed from them) and a fake clock, so the output is
deterministic: timestamps come from the fake wall clock, every scrape takes zero seconds (the duration
histograms only count), and the exporter's own process_* series are not registered. The llama-server process,
where a state has one, is a fixed fake.

Regenerate after an intended change, then review ``git diff tests/fixtures/exporter/golden``::

    SPECOPS_UPDATE_GOLDEN=1 PYTHONPATH=src python -m pytest -q tests/unit/test_exporter_golden.py

Without that variable a difference, or a missing golden file, fails the test.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from specops.exporter import state as state_module
from specops.exporter.collector import SpecopsCollector
from specops.exporter.fetch import http_error
from specops.exporter.logline import LogAcceptance
from specops.exporter.process import PidInfo, ProcessStats
from specops.exporter.state import Scraper
from tests.unit.fake_llama_fetcher import (
    ACCEPTED,
    CAP,
    DRAFT_TOKENS,
    DRAFTS,
    PER_POS,
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

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "exporter" / "golden"
UPDATE = os.environ.get("SPECOPS_UPDATE_GOLDEN") == "1"
BASE_METRICS = (CAP / "base_metrics.txt").read_text()
INTERVAL = 5.0

StateFn = Callable[[pytest.MonkeyPatch], Scraper]
FileStateFn = Callable[[pytest.MonkeyPatch, Path], Scraper]  # a state with files of its own (in a tmp dir)
STATES: dict[str, FileStateFn] = {}


def state(fn: StateFn) -> StateFn:
    STATES[fn.__name__.removeprefix("state_")] = lambda mp, tmp: fn(mp)
    return fn


def file_state(fn: FileStateFn) -> FileStateFn:
    STATES[fn.__name__.removeprefix("state_")] = fn
    return fn


def doubled(text: str) -> bytes:
    """Every counter of a capture doubled: traffic happened between two scrapes."""
    out = []
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        out.append(f"{name} {float(value) * 2:g}" if "_total" in name and not line.startswith("#") else line)
    return ("\n".join(out) + "\n").encode()


def passes(s: Scraper, clock: FakeClock, n: int = 1) -> Scraper:
    for _ in range(n):
        s.scrape_once()
        clock.advance(INTERVAL)
    return s


def traffic(f: FakeFetcher, s: Scraper, clock: FakeClock, metrics: str = SPEC_METRICS) -> Scraper:
    """Two passes, the second after traffic: the window has figures."""
    f.routes["/metrics"] = Answer(body=metrics.encode())
    passes(s, clock)
    f.routes["/metrics"] = Answer(body=doubled(metrics))
    return passes(s, clock)


# ---- the states --------------------------------------------------------------------------------------------

@state
def state_spec_one_pass(mp: pytest.MonkeyPatch) -> Scraper:
    """The real captures of a speculating server, one pass: no window figures yet."""
    clock = FakeClock()
    return passes(fake_scraper(FakeFetcher(), clock), clock)


@state
def state_spec_traffic(mp: pytest.MonkeyPatch) -> Scraper:
    """The speculating server's capture, then the same with every counter doubled."""
    clock = FakeClock()
    f = FakeFetcher()
    return traffic(f, fake_scraper(f, clock), clock)


@state
def state_baseline_server(mp: pytest.MonkeyPatch) -> Scraper:
    """The baseline capture (no speculation: spec counters 0, /slots says none), with traffic."""
    clock = FakeClock()
    f = FakeFetcher()
    f.routes["/slots"] = Answer(body=(CAP / "base_slots.json").read_bytes())
    return traffic(f, fake_scraper(f, clock), clock, BASE_METRICS)


@state
def state_ngram_mod(mp: pytest.MonkeyPatch) -> Scraper:
    """The ngram-mod capture (16 draft positions), /slots saying ngram-mod, with traffic."""
    clock = FakeClock()
    f = FakeFetcher()
    slots = (CAP / "spec_slots.json").read_text().replace('"none,draft-simple"', '"none,ngram-mod"')
    f.routes["/slots"] = Answer(body=slots.encode())
    return traffic(f, fake_scraper(f, clock), clock, (CAP / "ngram_mod_metrics_after_bench.txt").read_text())


@state
def state_old_build_with_log(mp: pytest.MonkeyPatch) -> Scraper:
    """A build without speculative counters in /metrics: they come from the acceptance log lines."""
    clock = FakeClock()
    f = FakeFetcher()
    acc = LogAcceptance()
    lines = (CAP / "server_log_excerpt.txt").read_text().splitlines()
    s = fake_scraper(f, clock, log_acceptance=acc)
    old = "\n".join(line for line in BASE_METRICS.splitlines() if "spec_decode" not in line) + "\n"
    for line in lines[:3]:
        acc.feed(line)
    traffic(f, s, clock, old)
    for line in lines[3:]:
        acc.feed(line)
    f.routes["/metrics"] = Answer(body=doubled(doubled(old).decode()))
    return passes(s, clock)


class FakeUnit:
    """A systemd unit's answer: PID, NRestarts, MemoryMax."""

    def find(self) -> PidInfo:
        return PidInfo(4242, systemd_restarts=3, memory_max_bytes=8 << 30)

    def forget(self) -> None:
        pass

    def describe(self) -> str:
        return "systemd:llama-server.service"


CMDLINE = ("llama-server", "-m", "/srv/models/SmolLM2-360M-Instruct.Q8_0.gguf", "-md",
           "/srv/models/SmolLM2-135M-Instruct.Q4_1.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
           "--port", "8080")


def fake_process(pid: int) -> ProcessStats:
    return ProcessStats(pid=pid, start_time=1_759_990_000.0, rss_bytes=512 << 20, vms_bytes=2 << 30,
                        cpu_seconds=123.5, threads=9, open_fds=31, cmdline=CMDLINE, anon_bytes=160 << 20)


@state
def state_systemd_process(mp: pytest.MonkeyPatch) -> Scraper:
    """Under systemd, with the process readable: its command line says what speculation is expected."""
    mp.setattr(state_module, "read_process", fake_process)
    clock = FakeClock()
    f = FakeFetcher()
    s = fake_scraper(f, clock)
    s.pid_source = FakeUnit()
    return traffic(f, s, clock)


@state
def state_command_line_beats_slots(mp: pytest.MonkeyPatch) -> Scraper:
    """The command line says --spec-type none while /slots says draft-simple: the command line wins."""
    cmdline = ("llama-server", "-m", "/srv/models/t.gguf", "--spec-type", "none")
    mp.setattr(state_module, "read_process", lambda pid: replace(fake_process(pid), cmdline=cmdline))
    clock = FakeClock()
    f = FakeFetcher()
    s = fake_scraper(f, clock)
    s.pid_source = FakeUnit()
    return passes(s, clock)


@state
def state_slots_unreadable(mp: pytest.MonkeyPatch) -> Scraper:
    """/slots fails from the start and no command line: speculation state unknown (not "off")."""
    clock = FakeClock()
    f = FakeFetcher()
    f.routes["/slots"] = Answer(500, b"boom")
    return passes(fake_scraper(f, clock), clock, 2)


@state
def state_slots_lost_after_known(mp: pytest.MonkeyPatch) -> Scraper:
    """/slots answered once, then fails: the state and the info labels stay as they were."""
    clock = FakeClock()
    f = FakeFetcher()
    s = passes(fake_scraper(f, clock), clock)
    f.routes["/slots"] = Answer(body=b"[]")
    return passes(s, clock, 2)


@state
def state_server_down_from_start(mp: pytest.MonkeyPatch) -> Scraper:
    """Nothing listens: up 0, everything unknown, no last-success timestamp."""
    clock = FakeClock()
    f = FakeFetcher({path: down(path) for path in ("/health", "/metrics", "/slots", "/props")})
    return passes(fake_scraper(f, clock), clock, 2)


@state
def state_server_killed_after_traffic(mp: pytest.MonkeyPatch) -> Scraper:
    """Figures existed; then the server went away: no figures, the last success stays, labels stay."""
    clock = FakeClock()
    f = FakeFetcher()
    s = traffic(f, fake_scraper(f, clock), clock)
    f.routes.update({path: down(path) for path in ("/health", "/metrics", "/slots", "/props")})
    return passes(s, clock, 3)


@state
def state_metrics_500s(mp: pytest.MonkeyPatch) -> Scraper:
    """Figures existed; then /metrics answers HTTP 500 while /health is ok."""
    clock = FakeClock()
    f = FakeFetcher()
    s = traffic(f, fake_scraper(f, clock), clock)
    f.routes["/metrics"] = Answer(500, b"boom")
    return passes(s, clock, 7)


@state
def state_metrics_cut(mp: pytest.MonkeyPatch) -> Scraper:
    """A /metrics body cut in the middle of a line: invalid, up 0."""
    clock = FakeClock()
    f = FakeFetcher()
    f.routes["/metrics"] = Answer(body=SPEC_METRICS[: len(SPEC_METRICS) // 2].encode())
    return passes(fake_scraper(f, clock), clock)


@state
def state_metrics_duplicated(mp: pytest.MonkeyPatch) -> Scraper:
    """Every sample of /metrics twice: invalid, up 0."""
    clock = FakeClock()
    f = FakeFetcher()
    body = "".join(line + "\n" + ("" if line.startswith("#") else line + "\n") for line in SPEC_METRICS.splitlines())
    f.routes["/metrics"] = Answer(body=body.encode())
    return passes(fake_scraper(f, clock), clock)


@state
def state_counters_backwards_then_nan(mp: pytest.MonkeyPatch) -> Scraper:
    """The issue's 278.3: counters go down in a pass with a NaN draft counter; then two good passes."""
    clock = FakeClock()
    f = FakeFetcher()
    s = fake_scraper(f, clock)
    for accepted, drafted in ((1000, 1000), (835, "NaN"), (835, 3), (835, 6)):
        f.routes["/metrics"] = Answer(body=metrics_body({ACCEPTED: accepted, DRAFT_TOKENS: drafted, DRAFTS: 100,
                                                         PREDICTED: 957, PREDICTED_SECONDS: 20}))
        passes(s, clock)
    return s


def steady_values(n: int, accepted: int = 8) -> dict[str, float]:
    """The spec capture's counters after ``n`` passes of steady traffic: 10 drafted tokens, ``accepted`` of them
    accepted, 2 verification steps, 25 tokens in 0.5 s per pass."""
    return {ACCEPTED: 835 + accepted * n, DRAFT_TOKENS: 862 + 10 * n, DRAFTS: 108 + 2 * n,
            PREDICTED: 957 + 25 * n, PREDICTED_SECONDS: 20 + 0.5 * n}


def steady(n: int, accepted: int = 8) -> bytes:
    """The spec capture after ``n`` passes of steady traffic (:func:`steady_values`), its per-position counters
    adding up to the accepted total."""
    return metrics_body(steady_values(n, accepted))


@state
def state_counters_contradict(mp: pytest.MonkeyPatch) -> Scraper:
    """Issue 29: accepted tokens rise by 20 a pass, drafted tokens by 10: each pass after the first is refused
    (an invalid_value error), and no derived figure is exported (it was a clamped 1.0 and a length of 11)."""
    clock = FakeClock()
    f = FakeFetcher()
    s = fake_scraper(f, clock)
    for n in range(4):
        f.routes["/metrics"] = Answer(body=steady(n, accepted=20))
        passes(s, clock)
    return s


FROZEN_POSITIONS = {f'{PER_POS}{{position="{p}"}}': v for p, v in enumerate((108, 105, 104, 104, 104, 104, 104, 102))}


@state
def state_frozen_positions(mp: pytest.MonkeyPatch) -> Scraper:
    """Issue 51: the per-position accepted counters stand still (the capture's) while the accepted total rises by 8
    a pass. The window's acceptance (0.8), mean length (5) and tokens/s (50) stand; the per-position ratios, which
    read 0.0 beside them with no error, are withdrawn and each pass with a window counts an invalid_value error."""
    clock = FakeClock()
    f = FakeFetcher()
    s = fake_scraper(f, clock)
    for n in range(4):
        f.routes["/metrics"] = Answer(body=metrics_body({**FROZEN_POSITIONS, **steady_values(n)}))
        passes(s, clock)
    return s


@state
def state_counters_flap_back(mp: pytest.MonkeyPatch) -> Scraper:
    """Issue 29: a proxy flapping between two servers: A, A, B (lower counters), A, A. The figures are A's own
    traffic since it came back (0.8, 5, 50 tokens/s), not the jump from B back to A counted as traffic."""
    clock = FakeClock()
    f = FakeFetcher()
    s = fake_scraper(f, clock)
    server_b = metrics_body({ACCEPTED: 100, DRAFT_TOKENS: 125, DRAFTS: 25, PREDICTED: 300, PREDICTED_SECONDS: 5})
    for body in (steady(0), steady(1), server_b, steady(3), steady(4)):
        f.routes["/metrics"] = Answer(body=body)
        passes(s, clock)
    return s


@state
def state_window_gone_stale(mp: pytest.MonkeyPatch) -> Scraper:
    """Figures existed, then no pass for longer than twice the window (a stalled exporter): none shown."""
    clock = FakeClock()
    f = FakeFetcher()
    s = traffic(f, fake_scraper(f, clock, window=60), clock)
    clock.advance(121)
    return s


@state
def state_api_key_refused(mp: pytest.MonkeyPatch) -> Scraper:
    """Issue 40: a keyed llama-server and an exporter holding a wrong key. /health needs no key (healthy 1); /metrics,
    /slots and /props answer 401: up 0 (the exporter cannot read the server), auth_refused 1, errors of kind auth."""
    clock = FakeClock()
    f = FakeFetcher()
    for path in ("/metrics", "/slots", "/props"):
        f.routes[path] = http_error(path, 401, api_key=True)
    return passes(fake_scraper(f, clock), clock, 2)


# ---- the deploy's speed-gate record (--speed-gate-file) ------------------------------------------------------
# The record names the unit it was written for (unit_file, installed_unit_sha256); the exporter checks it against
# the unit file on disk. Here the "systemd" directory is a tmp dir (the exporter only accepts unit files under it);
# the record's mtime is fixed, so the expositions do not depend on where or when the test runs.
UNIT = "[Service]\nExecStart=/opt/llama.cpp/bin/llama-server --port 8080 -md /srv/d.gguf --spec-type draft-simple\n"
GATE_MTIME = 1_759_996_400.0


def gate_record(**kw: object) -> dict[str, object]:
    return {"plain_tps": 15.1, "speculative_tps": 9.1, "ratio": 0.6, "min_ratio": 1.0, "break_even_acceptance": 1.3,
            "verdict": "loses", "action": "warn", "serving": "speculative", "spec_type": "draft-simple",
            "mode": "side by side", "measured_at": "2026-11-23T14:00:00Z", "build_id": "0c1e57098-cpu", **kw}


def gate_scraper(tmp: Path, record: dict[str, object] | str | None, unit_text: str = UNIT,
                 metrics: str | None = None, slots: bytes | None = None) -> Scraper:
    """One pass of the speculating server's captures, with ``record`` (JSON text as is, None: no file) at the
    configured speed-gate path, naming the unit written with ``unit_text``; with ``metrics``, two passes of that
    capture with traffic between them (and ``slots`` for /slots)."""
    units = tmp / "systemd" / "system"
    units.mkdir(parents=True, exist_ok=True)
    unit = units / "llama-server-speculative.service"
    unit.write_text(unit_text)
    path = tmp / "speed-gate.json"
    path.unlink(missing_ok=True)
    if record is not None:
        path.write_text(record if isinstance(record, str) else json.dumps(record))
        os.utime(path, (GATE_MTIME, GATE_MTIME))
    clock = FakeClock()
    f = FakeFetcher()
    if slots is not None:
        f.routes["/slots"] = Answer(body=slots)
    s = fake_scraper(f, clock, speed_gate_file=str(path), speed_gate_unit_dirs=(str(units),))
    return passes(s, clock) if metrics is None else traffic(f, s, clock, metrics)


def for_unit(tmp: Path, text: str = UNIT) -> dict[str, str]:
    """The fields the deploy writes: the installed unit file and the sha256 of ``text``."""
    return {"unit_file": str(tmp / "systemd" / "system" / "llama-server-speculative.service"),
            "installed_unit_sha256": hashlib.sha256(text.encode()).hexdigest()}


@file_state
def state_speed_gate_ok(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """A measured record (loses, kept with warn) for the unit on disk: state ok, the figures and the info."""
    return gate_scraper(tmp, gate_record(**for_unit(tmp)))


@file_state
def state_speed_gate_not_measured(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """The gate was off: a not_measured record for the unit on disk is ok, and has no figures to export."""
    record = {"verdict": "not_measured", "action": "off", "serving": "speculative", "spec_type": "draft-simple",
              "build_id": "0c1e57098-cpu", **for_unit(tmp)}
    return gate_scraper(tmp, record)


@file_state
def state_speed_gate_missing(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """The record was deleted: state missing, no figures."""
    return gate_scraper(tmp, None)


@file_state
def state_speed_gate_invalid(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """The record is not JSON: state invalid, no figures."""
    return gate_scraper(tmp, '{"verdict": "pays", ')


@file_state
def state_speed_gate_stale(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """Issue 40: a fallback's record (serving plain) while the unit on disk was changed since (it speculates
    again): state stale, and neither the figures nor the old verdict."""
    plain = UNIT.replace(" -md /srv/d.gguf --spec-type draft-simple", " --spec-type none")
    return gate_scraper(tmp, gate_record(action="fallback", serving="plain", **for_unit(tmp, plain)))


# The deploy's tune kept in the record with its cost model (issue 52 item 3): the tuned profile priced on the live
# traffic, next to its measured figure, with its prediction band for the window's n requests and its upper end (issue
# 62 item 7); absent while plain decoding is served.
TUNE_LIVE = {"chosen": "exact-ngram-mod", "spec_type": "ngram-mod", "predicted": None,
             "speedup": {"estimate": 1.63, "low": 1.04, "high": 2.56, "n": 12}, "reused": False,
             "when": "2026-11-27T19:43:10+0000", "tasks": "team-edits.jsonl (sha256 0123456789abcdef)",
             "mix": "equal shares",
             "live_model": {"target_step_s": 0.094, "target_rel": {"1": 1.0, "2": 1.48, "3": 1.55, "5": 1.55,
                                                                   "9": 2.49, "13": 3.26, "17": 3.26},
                            "draft_step_s": 0.0, "draft_rel": None,
                            "overheads": {"per_token_s": 0.0, "per_round_s": 0.0, "per_drafted_s": 0.00725},
                            "measured": 1.633, "modelled": 1.762, "round_correction_s": 0.2305,
                            # the live check's prediction band for a window of n requests (issue 62 item 7)
                            "band": {"level": 0.99, "spreads": [
                                {"mix": "the tune's shares", "tokens_per_request": 96.0, "centre": 1.633,
                                 "windows": [{"n": 1, "low": 0.95, "high": 3.1}, {"n": 10, "low": 1.2, "high": 2.3},
                                             {"n": 100, "low": 1.4, "high": 1.9}]}],
                                "windows": {"mix": "the tune's shares", "tokens_per_request": 96.0, "centre": 1.633,
                                            "windows": [{"n": 1, "low": 1.0, "high": 2.9},
                                                        {"n": 10, "low": 1.35, "high": 2.0},
                                                        {"n": 100, "low": 1.52, "high": 1.75}]}}}}


@file_state
def state_speed_gate_tune_live(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """An ok record keeping the tune's model, the server speculating with traffic: the live prediction is there."""
    return gate_scraper(tmp, gate_record(tune=TUNE_LIVE, **for_unit(tmp)), metrics=SPEC_METRICS)


@file_state
def state_speed_gate_tune_live_plain(mp: pytest.MonkeyPatch, tmp: Path) -> Scraper:
    """The same record while the server decodes plain (the baseline capture and /slots): no live prediction."""
    return gate_scraper(tmp, gate_record(tune=TUNE_LIVE, **for_unit(tmp)), metrics=BASE_METRICS,
                        slots=(CAP / "base_slots.json").read_bytes())


# ---- TabbyAPI (--engine tabbyapi) ----------------------------------------------------------------------------
# A fake TabbyAPI: the bodies its /metrics renders (tests/fixtures/exporter/tabbyapi-5b73894*.txt, produced by
# its own common/metrics.py; it needs a CUDA GPU to run for real) and its /health answer. It has no /slots nor
# /props: the exporter must not ask.
TABBY = GOLDEN.parent / "tabbyapi-5b73894.txt"
TABBY_LATER = GOLDEN.parent / "tabbyapi-5b73894-later.txt"
TABBY_HEALTH = b'{"status":"healthy","issues":[]}'


def tabby_fetcher() -> FakeFetcher:
    return FakeFetcher({"/health": Answer(body=TABBY_HEALTH), "/metrics": Answer(body=TABBY.read_bytes())})


@state
def state_tabbyapi_traffic(mp: pytest.MonkeyPatch) -> Scraper:
    """TabbyAPI after 12 requests, then after 21: acceptance ratio from its counters; no drafts counter, so no
    mean acceptance length; speculation unknown (no command line to read, no /slots)."""
    clock = FakeClock()
    f = tabby_fetcher()
    s = passes(fake_scraper(f, clock, engine="tabbyapi"), clock)
    f.routes["/metrics"] = Answer(body=TABBY_LATER.read_bytes())
    return passes(s, clock)


@state
def state_tabbyapi_without_spec_counters(mp: pytest.MonkeyPatch) -> Scraper:
    """The first /metrics of TabbyAPI's pull request (9d61e78) had no spec_decode series: none exported."""
    clock = FakeClock()
    f = tabby_fetcher()
    old = [TABBY, TABBY_LATER]
    bodies = ["\n".join(x for x in p.read_text().splitlines() if "spec_decode" not in x) + "\n" for p in old]
    s = fake_scraper(f, clock, engine="tabbyapi")
    for body in bodies:
        f.routes["/metrics"] = Answer(body=body.encode())
        passes(s, clock)
    return s


@state
def state_tabbyapi_metrics_disabled(mp: pytest.MonkeyPatch) -> Scraper:
    """TabbyAPI without network.enable_metrics (or a build without /metrics): 404, up 0, healthy 1."""
    clock = FakeClock()
    f = tabby_fetcher()
    f.routes["/metrics"] = Answer(404, b'{"detail":"The metrics endpoint is disabled."}')
    return passes(fake_scraper(f, clock, engine="tabbyapi"), clock, 2)


# ---- the comparison ----------------------------------------------------------------------------------------

def render(scraper: Scraper) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecopsCollector(scraper))
    return generate_latest(registry).decode()


@pytest.mark.parametrize("name", sorted(STATES))
def test_exposition_matches_golden(name, monkeypatch, tmp_path):
    text = render(STATES[name](monkeypatch, tmp_path))
    assert render(STATES[name](monkeypatch, tmp_path)) == text, "the exposition is not deterministic"
    path = GOLDEN / f"{name}.prom"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with SPECOPS_UPDATE_GOLDEN=1 and review the new file"
    golden = path.read_text()
    if text != golden:
        diff = "".join(difflib.unified_diff(golden.splitlines(True), text.splitlines(True),
                                            f"golden/{name}.prom", "exporter output"))
        pytest.fail(f"exposition differs from golden/{name}.prom (SPECOPS_UPDATE_GOLDEN=1 to accept):\n{diff}")


def test_no_golden_without_a_state():
    orphans = sorted(p.stem for p in GOLDEN.glob("*.prom") if p.stem not in STATES)
    assert not orphans, f"golden files without a state: {orphans}"
