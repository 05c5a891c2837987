"""``--engine tabbyapi``: the exporter reads TabbyAPI's ``/metrics`` (``tabbyapi:`` names) with the same
collectors, gives only what means the same as llama-server's series, and says which series it cannot give.

The bodies are tests/fixtures/exporter/tabbyapi-5b73894*.txt, rendered by TabbyAPI's own ``common/metrics.py``
(pull request #443 at 5b73894; see the fixtures' README): a TabbyAPI server needs a CUDA GPU, which no machine of
this project has, so a fake serves what it would.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from specops.exporter.app import Exporter
from specops.exporter.collector import SpecopsCollector
from specops.exporter.config import ExporterConfig
from specops.exporter.engine import TABBY_UNSUPPORTED, TABBYAPI, engine_named
from specops.exporter.llama_metrics import parse_server_metrics
from specops.exporter.speculation import UNKNOWN
from tests.unit.fake_llama_fetcher import Answer, FakeClock, FakeFetcher, fake_scraper

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "exporter"
BODY = (FIX / "tabbyapi-5b73894.txt").read_text()
LATER = (FIX / "tabbyapi-5b73894-later.txt").read_text()
HEALTH = b'{"status":"healthy","issues":[]}'
TABBY = engine_named(TABBYAPI)


def value(body: str, name: str) -> float:
    (m,) = re.findall(rf"^{re.escape(name)} (\S+)$", body, re.M)
    return float(m)


def fetcher() -> FakeFetcher:
    return FakeFetcher({"/health": Answer(body=HEALTH), "/metrics": Answer(body=BODY.encode())})


def test_tabbyapi_series_map_to_ours_with_the_same_values():
    m = parse_server_metrics(BODY, TABBY)
    assert not (m.bad_lines or m.invalid_values or m.truncated or m.duplicates)
    assert m.counters == {
        "llamacpp_prompt_tokens_total": value(BODY, "tabbyapi:prompt_tokens_total"),
        "llamacpp_prompt_tokens_cached_total": value(BODY, "tabbyapi:cached_tokens_total"),
        "llamacpp_prompt_seconds_total": value(BODY, "tabbyapi:prompt_seconds_total"),
        "llamacpp_tokens_predicted_total": value(BODY, "tabbyapi:tokens_predicted_total"),
        "llamacpp_tokens_predicted_seconds_total": value(BODY, "tabbyapi:tokens_predicted_seconds_total"),
        "llamacpp_spec_draft_tokens_total": value(BODY, "tabbyapi:spec_decode_num_draft_tokens_total"),
        "llamacpp_spec_accepted_tokens_total": value(BODY, "tabbyapi:spec_decode_num_accepted_tokens_total"),
    }
    assert m.gauges == {"llamacpp_requests_processing": 1.0, "llamacpp_requests_deferred": 0.0}
    assert m.has_spec_counters and not m.spec_counters_partial and not m.accepted_per_pos


def test_the_llama_cpp_engine_reads_nothing_of_it_and_says_which_engine_it_is(caplog):
    assert parse_server_metrics(BODY).empty
    clock = FakeClock()
    f = fetcher()
    s = fake_scraper(f, clock)  # default engine: llama.cpp
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        snap = s.scrape_once()
    assert not snap.up
    assert "these are tabbyapi's: run the exporter with --engine tabbyapi" in caplog.text
    errors, _, _ = s.selfm.copy()
    assert errors[("metrics", "shape")] == 1
    assert parse_server_metrics((FIX.parent / "llama-server-0c1e57098" / "base_metrics.txt").read_text(),
                                TABBY).empty


def test_tabbyapi_pass_asks_no_slots_no_props_and_counts_healthy():
    clock = FakeClock()
    f = fetcher()
    s = fake_scraper(f, clock, engine=TABBYAPI)
    for _ in range(3):
        snap = s.scrape_once()
        clock.advance(5)
    assert snap.up and snap.healthy
    assert set(f.hits) == {"/health", "/metrics"}, f.hits
    assert snap.slots is None
    assert snap.speculation.state == UNKNOWN and not snap.speculation.known


def test_unhealthy_tabbyapi_is_not_healthy():
    f = fetcher()
    f.routes["/health"] = Answer(503, b'{"status":"unhealthy","issues":[{"time":"t","description":"x"}]}')
    snap = fake_scraper(f, FakeClock(), engine=TABBYAPI).scrape_once()
    assert snap.up and not snap.healthy


def test_acceptance_ratio_is_exact_and_what_tabbyapi_cannot_give_is_absent():
    clock = FakeClock()
    f = fetcher()
    s = fake_scraper(f, clock, engine=TABBYAPI)
    s.scrape_once()
    clock.advance(5)
    f.routes["/metrics"] = Answer(body=LATER.encode())
    snap = s.scrape_once()
    accepted = [value(b, "tabbyapi:spec_decode_num_accepted_tokens_total") for b in (BODY, LATER)]
    drafted = [value(b, "tabbyapi:spec_decode_num_draft_tokens_total") for b in (BODY, LATER)]
    assert snap.window.acceptance_ratio == (accepted[1] - accepted[0]) / (drafted[1] - drafted[0])
    assert snap.window.mean_acceptance_length is None and not snap.window.acceptance_by_position

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecopsCollector(s))
    text = generate_latest(registry).decode()
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    for series, _ in TABBY_UNSUPPORTED:
        assert series not in samples, series  # absent, not 0
        assert f'series="{series}"' in text  # and said so
    assert "llamacpp_speculation_expected" not in samples  # unknown is not "off"
    assert "llamacpp_speculation_state_known 0.0" in text


def test_startup_logs_the_series_tabbyapi_cannot_give(caplog):
    exp = Exporter(ExporterConfig(server_url="http://127.0.0.1:9", engine=TABBYAPI, pid_from_port=False,
                                  nvidia_smi="off", listen_port=0))
    with caplog.at_level(logging.INFO, logger="specops.exporter"):
        exp.start(serve=True)
        exp.shutdown()
    logged = caplog.text
    assert "(TabbyAPI)" in logged
    for series, reason in TABBY_UNSUPPORTED:
        assert f"engine tabbyapi: no {series} ({reason})" in logged


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specops.exporter", *args], capture_output=True, text=True,
                          timeout=60)


def test_bad_engine_settings_end_in_one_line():
    r = run_cli("--engine", "vllm", "--once")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--engine: 'vllm' is not one of llama.cpp, tabbyapi" in r.stderr
    r = run_cli("--engine", "tabbyapi", "--log-file", "/dev/null", "--once")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--engine tabbyapi does not write it" in r.stderr
