"""Property tests: no payload makes the exporter's parsers or a scrape pass raise."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from specops.exporter.collector import SpecopsCollector
from specops.exporter.gpu import parse_compute_apps
from specops.exporter.llama_metrics import parse_server_metrics
from specops.exporter.logline import parse_acceptance_line
from specops.exporter.process import parse_launch, parse_systemctl_show
from specops.exporter.props import parse_props
from specops.exporter.slots import ShapeError, summarize_slots
from tests.unit.test_exporter_faults import FaultServer, Reply, make_scraper

CAP = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server-0c1e57098"
REAL_METRICS = (CAP / "spec_metrics_after_bench.txt").read_text()
METRIC_NAMES = [line.split()[0] for line in REAL_METRICS.splitlines() if line and not line.startswith("#")]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=30,
)
# slot-like objects with the real keys and arbitrary values
slot_like = st.fixed_dictionaries({}, optional={
    "id": json_values, "speculative": json_values, "is_processing": json_values, "n_ctx": json_values,
    "params": st.dictionaries(st.sampled_from(["speculative.types", "seed"]), json_values) | json_values,
})
number_text = st.sampled_from(["0", "1", "1e3", "NaN", "+Inf", "-Inf", "-1", "1.5", "", "x", "9" * 400])
metric_line = st.one_of(
    st.builds(lambda n, v: f"{n} {v}", st.sampled_from(METRIC_NAMES), number_text),
    st.builds(lambda p, v: f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}} {v}',
              st.text(max_size=5), number_text),
    st.text(max_size=80),
    st.sampled_from(["# TYPE llamacpp:tokens_predicted_total counter", "# HELP x y", "#", "{", '"']),
)
metrics_text = st.lists(metric_line, max_size=30).map("\n".join)


@given(metrics_text)
@example('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="²"} 0')  # str.isdigit() is True for "²"
def test_metrics_parser_never_raises_and_keeps_only_sane_values(text):
    m = parse_server_metrics(text)
    for value in (*m.counters.values(), *m.gauges.values(), *m.accepted_per_pos.values()):
        assert math.isfinite(value) and value >= 0


@given(st.text(max_size=2000))
def test_metrics_parser_on_arbitrary_text(text):
    parse_server_metrics(text)


@given(st.binary(max_size=500))
def test_metrics_parser_on_truncated_real_body(cut_bytes):
    cut = len(cut_bytes) * 7 % (len(REAL_METRICS) + 1)
    m = parse_server_metrics(REAL_METRICS[:cut])
    assert all(math.isfinite(v) for v in m.counters.values())


@given(st.lists(slot_like | json_values, max_size=6) | json_values)
def test_slots_only_raise_shape_errors(payload):
    try:
        s = summarize_slots(payload)
    except ShapeError:
        return
    assert 0 <= s.busy <= s.total and 0 <= s.speculative <= s.total


@given(json_values | st.dictionaries(st.sampled_from(["build_info", "model_path", "total_slots"]), json_values))
def test_props_only_raise_shape_errors(payload):
    with contextlib.suppress(ShapeError):
        parse_props(payload)


@given(st.text(max_size=300), st.integers(0, 10**12), st.integers(0, 10**12), st.text(max_size=10))
def test_log_line_parser(noise, a, g, mean):
    for line in (noise, f"{noise} draft acceptance = {mean} ({a} accepted / {g} generated), mean len = {mean}"):
        parsed = parse_acceptance_line(line)
        if parsed is not None:
            assert 0 <= parsed.accepted <= parsed.generated
            assert parsed.drafts is None or parsed.drafts >= 1


@given(st.text(max_size=500))
def test_small_text_parsers(text):
    parse_compute_apps(text)
    parse_systemctl_show(text)
    parse_launch(text.split(" "))


@pytest.mark.slow(reason="starts an HTTP server per example: 30 s")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metrics=metrics_text | st.text(max_size=300),
       slots=st.lists(slot_like, max_size=4).map(json.dumps) | st.text(max_size=50),
       props=json_values.map(json.dumps), health=json_values.map(json.dumps),
       status=st.sampled_from([200, 200, 200, 404, 500, 503]))
def test_a_scrape_pass_survives_any_payload(metrics, slots, props, health, status):
    server = FaultServer()
    try:
        server.routes.update({
            "/metrics": Reply(status, metrics.encode("utf-8", "surrogatepass")),
            "/slots": Reply(body=slots.encode("utf-8", "surrogatepass")),
            "/props": Reply(body=props.encode()), "/health": Reply(body=health.encode()),
        })
        scraper = make_scraper(server.url)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SpecopsCollector(scraper))
        for _ in range(2):
            snap = scraper.scrape_once()
            generate_latest(registry)  # the exposition can always be rendered
        assert snap.up == (snap.metrics is not None)
    finally:
        server.close()
