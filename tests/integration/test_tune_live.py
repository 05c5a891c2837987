"""The tuned profile priced again on live traffic (issue 52 item 3), with real parts: llama-bench prices SmolLM2's
steps, a real ngram-mod server is measured against the unit's plain decoding on a team's copy-heavy edits (the tune's
block format, the tune's model builder), the model goes into a speed-gate record as the deploy writes it, and a real
exporter follows the ngram-mod server while the traffic changes from edits to prose: the live prediction is there on
the edits and moves on prose; on a plain server it is absent.

And the live alerts replayed as production runs them (issue 62 item 7): a real Prometheus with the repository's rules,
their holds scaled down, scrapes an exporter that follows a real ngram-simple server; new requests of the tune's kind
(edits it did not measure) and its own leave the traffic alert quiet. Prose on an edit-tuned host cannot be made to
read outside in this lab: on this CPU the edits' own live figures spread 0.65-1.41 (Qwen2.5-Coder 0.5B, ngram-simple)
and prose reads 1.00 among them; the promtool tests hold that case on simulated traffic whose edits pay alike."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from specops.bench import ceiling as ceil
from specops.bench.arms import EXACT_CACHE
from specops.bench.costmodel import Overheads, StepCosts
from specops.bench.runner import counter_delta, spec_counters
from specops.exporter.app import Exporter
from specops.exporter.config import ExporterConfig
from specops.server import ServerProcess, free_port
from specops.soak.alerts import evaluate
from specops.tune import band as bands
from specops.tune import deploy, live, windows
from tests import lab

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune-tasks"
WINDOW = 10.0  # the exporter's window: short, so the prose is priced alone after the edits
TOKENS = 48


def tasks(name: str) -> list[list[dict[str, str]]]:
    return [json.loads(line)["messages"] for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


def wait_for(pred: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def timed(server: ServerProcess, messages: list[dict[str, str]], tokens: int = TOKENS) -> dict:
    """One request as a bench block records it: tokens, the client's decode rate, the server's counter deltas."""
    before = spec_counters(server.client.metrics_text())
    res = server.client.chat(messages, max_tokens=tokens, temperature=0.0, seed=1, cache_prompt=False)
    t = res["timings"]
    spec = counter_delta(before, spec_counters(server.client.metrics_text()))
    return {"n_predicted": t["predicted_n"], "decode_tps": t["predicted_per_second"], "spec": spec}


def series(text: str, name: str) -> float | None:
    line = next((x for x in text.splitlines() if x.startswith(name + " ")), None)
    return None if line is None else float(line.rpartition(" ")[2])


def live_value(exp: Exporter) -> float | None:
    return series(exp.exposition().decode(), "specops_tune_live_predicted_speedup")


def write_record(tmp_path: Path, model: live.LiveModel, band: bands.Band, n_blocks: int,
                 spec_type: str) -> tuple[Path, Path]:
    """The speed-gate record as the deploy writes it (the tune's summary for the unit on disk, its live model and
    band) and the unit directory: (record, units)."""
    arm = f"exact-{spec_type}"
    units = tmp_path / "systemd" / "system"
    units.mkdir(parents=True)
    unit_file = units / "llama-server-speculative.service"
    unit_file.write_text(f"[Service]\nExecStart=/opt/llama.cpp/bin/llama-server --spec-type {spec_type}\n")
    result = {"chosen": arm, "vars": {"llama_server_spec_type": spec_type},
              "candidates": [{"name": arm, "measured": f"{model.measured:.2f}×",
                              "measured_interval": {"estimate": model.measured, "low": model.measured * 0.9,
                                                    "high": model.measured * 1.1, "n": n_blocks}}],
              "live_model": {**model.to_dict(), "band": band.to_dict()}, "when": "now",
              "task_source": "team-edits.jsonl"}
    summary = deploy.summary(result, deploy.Applied({}), reused=False)
    record = tmp_path / "speed-gate.json"
    record.write_text(json.dumps({"verdict": "not_measured", "action": "off", "serving": "speculative",
                                  "spec_type": spec_type, "unit_file": str(unit_file),
                                  "installed_unit_sha256": hashlib.sha256(unit_file.read_bytes()).hexdigest(),
                                  "tune": summary}))
    return record, units


def test_the_live_prediction_moves_when_the_traffic_changes(llama_build: lab.LlamaBuild, smollm: Path,
                                                          start_server, tmp_path: Path) -> None:
    # the host's step costs, as the tune's ceiling measures them (one thread, short context)
    num = ceil.Numerics.of_profile(EXACT_CACHE, {})
    data = ceil.measure(llama_build.bin("llama-bench"), smollm, [num], {}, depth=64, reps=1, threads=1,
                        progress=lambda _: None, ks=(1, 2, 5, 9, 17))
    costs = StepCosts.from_ceiling(data, num.name)
    plain = start_server(spec_type="none", **EXACT_CACHE)  # the unit's plain decoding
    spec = start_server(spec_type="ngram-mod", **EXACT_CACHE)
    edits, prose = tasks("team-edits.jsonl")[:4], tasks("team-prose.jsonl")
    blocks = [{"workload": "edit", "task": f"edit-{i}",
               "results": {"baseline": timed(plain, m), "exact-ngram-mod": timed(spec, m)}}
              for i, m in enumerate(edits)]
    model, why = live.build(costs, Overheads(0.0), blocks, "exact-ngram-mod", "baseline")
    assert model is not None, why
    # the live check's prediction band for a window of n requests, as the tune keeps it (an edit-tuned host)
    band = windows.band(windows.from_blocks(blocks, "exact-ngram-mod", "baseline"), None, model.predict_sums)

    record, units = write_record(tmp_path, model, band, len(blocks), "ngram-mod")

    def exporter(server: ServerProcess) -> Exporter:
        exp = Exporter(ExporterConfig(server_url=server.base_url, listen_port=free_port(), interval=0.5,
                                      window=WINDOW, nvidia_smi="off", pid_from_port=False,
                                      speed_gate_file=str(record), speed_gate_unit_dirs=(str(units),)))
        exp.start(serve=False)
        return exp

    exp, exp_plain = exporter(spec), exporter(plain)
    try:
        # edits: the n-gram drafts from the prompt's code, as the tune measured
        # (read for a while right after each request: the window is short, and a loaded host's next request could
        # outlast it; not every edit drafts, so every reading is kept)
        on_edits: list[float] = []
        for m in edits:
            spec.client.chat(m, max_tokens=TOKENS, temperature=0.0, seed=1, cache_prompt=False)
            wait_for(lambda: live_value(exp), 30, "the live prediction on edits")
            until = time.monotonic() + 2.0
            while time.monotonic() < until:
                value = live_value(exp)
                if value is not None:
                    on_edits.append(value)
                time.sleep(0.2)
        # nothing sent for a window: no tokens in it, no figure (absent, not 1 nor 0)
        wait_for(lambda: live_value(exp) is None, 4 * WINDOW, "the live prediction to go with the traffic")
        # prose: what the n-gram finds to draft there is what moves the figure
        for m in prose:
            spec.client.chat(m, max_tokens=TOKENS, temperature=0.0, seed=1, cache_prompt=False)
        prose_figure = float(wait_for(lambda: live_value(exp), 30, "the live prediction on prose"))  # type: ignore[arg-type]
        # the figure moved with the traffic (here, idle: edits 1.089, prose 1.000 -- the prose drafted nothing --
        # against a measured 1.014); which way depends on whether ngram-mod paid in this run's measurement, so only
        # the move and its size are asserted
        print(f"live prediction: edits {sorted(set(round(v, 3) for v in on_edits))}, prose {prose_figure:.3f}")
        assert max(abs(prose_figure - v) for v in on_edits) > 0.01, (prose_figure, on_edits, model.to_dict())
        assert "specops_tune_measured_speedup " in exp.exposition().decode()  # beside the tune's own figure
        # and, while there is a live figure, its band for the window's n requests and its upper end
        text = exp.exposition().decode()
        if "specops_tune_live_predicted_speedup " in text:
            low, high = (series(text, f"specops_tune_live_band_{e}") for e in ("low", "high"))
            assert low is not None and high is not None and 0 < low <= high, text
            upper = series(text, "specops_tune_live_predicted_speedup_upper")
            value = series(text, "specops_tune_live_predicted_speedup")
            assert upper is not None and value is not None and upper >= value
        # the plain server with the same record: plain decoding has no live acceptance, so no figure at all
        assert live_value(exp_plain) is None and "specops_tune_info" in exp_plain.exposition().decode()
    finally:
        exp.shutdown()
        exp_plain.shutdown()


# ---- the live alerts replayed as production runs them (issue 62 item 7) -----------------------------------------

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "configs" / "prometheus" / "rules" / "specops-alerts.yml"
LIVE_ALERTS = ("SpecopsTuneTrafficChanged", "SpecopsTuneLivePredictsLoss")
REPLAY_WINDOW = 20.0  # the exporter's window (5 minutes in production)
HOLD = 10  # the two live alerts' for: (1 h and 30 min in production), scaled with the window
REPLAY_TOKENS = 64
MEASURED = 6  # the edits the tune measures, of the team's 12: the other 6 are the live traffic's new requests


def scaled_rules(tmp: Path) -> Path:
    """The repository's alert rules with the two live alerts' holds at ``HOLD`` seconds (expressions unchanged)."""
    data = yaml.safe_load(ALERTS.read_text())
    rules = {r["alert"]: r for g in data["groups"] for r in g["rules"] if "alert" in r}
    assert {rules[a]["for"] for a in LIVE_ALERTS} == {"1h", "30m"}, "the production holds this test scales"
    for name in LIVE_ALERTS:
        rules[name]["for"] = f"{HOLD}s"
    path = tmp / "specops-alerts.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_prometheus(processes, tmp: Path, exporter_port: int, rules: Path) -> str:  # type: ignore[no-untyped-def]
    """A real Prometheus (Debian package) scraping the exporter every second with ``rules``; its URL."""
    assert shutil.which("prometheus"), "prometheus is installed by scripts/bootstrap"
    cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": [str(rules)],
           "scrape_configs": [{"job_name": "specops-exporter", "scrape_interval": "1s", "scrape_timeout": "1s",
                               "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    processes.start(["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], tmp / "prometheus.log")
    url = f"http://127.0.0.1:{port}"

    def scraped() -> bool:
        try:
            res = httpx.get(f"{url}/api/v1/query", params={"query": 'up{job="specops-exporter"}'}).json()
            return bool(res["data"]["result"]) and res["data"]["result"][0]["value"][1] == "1"
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    wait_for(scraped, 120, "Prometheus to scrape the exporter")
    return url


def test_new_requests_of_the_tunes_kind_leave_the_live_alerts_quiet(llama_build: lab.LlamaBuild, smollm: Path,
                                                                    start_server, processes, tmp_path: Path) -> None:
    """A real Prometheus scrapes a real exporter that follows a real ngram-simple server, with the repository's alert
    rules (expressions unchanged, holds scaled to ``HOLD`` beside the exporter's ``REPLAY_WINDOW``). The tune measured
    6 of the team's 12 edits; the traffic is the other 6 (new requests of that kind, never measured) and the 6 again,
    for three holds beyond a full window: the traffic alert's condition does not hold for its hold. (The first
    replay, with ngram-mod, had new edits read below a band from 6 measured: 0.78-0.97 against [0.96, 1.19], the
    condition true 12 s against a 10 s hold; the band is now widened for the kinds' tasks a tune did not measure.)
    ngram-simple drafts from the request's own context only, so a request sent again reads as it did when measured
    (ngram-mod keeps its table across requests: a repeat drafts the answer it has seen, a change the traffic alert
    reports)."""
    num = ceil.Numerics.of_profile(EXACT_CACHE, {})
    data = ceil.measure(llama_build.bin("llama-bench"), smollm, [num], {}, depth=64, reps=1, threads=1,
                        progress=lambda _: None, ks=(1, 2, 5, 9, 17))
    costs = StepCosts.from_ceiling(data, num.name)
    plain = start_server(spec_type="none", **EXACT_CACHE)
    spec = start_server(spec_type="ngram-simple", **EXACT_CACHE)
    team = tasks("team-edits.jsonl")
    measured, fresh = team[:MEASURED], team[MEASURED:]
    arm = "exact-ngram-simple"
    blocks = [{"workload": "edit", "task": f"edit-{i}",
               "results": {"baseline": timed(plain, m, REPLAY_TOKENS), arm: timed(spec, m, REPLAY_TOKENS)}}
              for i, m in enumerate(measured)]
    model, why = live.build(costs, Overheads(0.0), blocks, arm, "baseline")
    assert model is not None, why
    band = windows.band(windows.from_blocks(blocks, arm, "baseline"), None, model.predict_sums)
    assert band.shares.tasks == MEASURED and band.shares.widened > 1.5
    record, units = write_record(tmp_path, model, band, len(blocks), "ngram-simple")
    exp = Exporter(ExporterConfig(server_url=spec.base_url, listen_port=free_port(), listen_address="127.0.0.1",
                                  interval=0.5, window=REPLAY_WINDOW, nvidia_smi="off", pid_from_port=False,
                                  speed_gate_file=str(record), speed_gate_unit_dirs=(str(units),)))
    exp.start(serve=True)
    try:
        rules = scaled_rules(tmp_path)
        prom = start_prometheus(processes, tmp_path, exp.cfg.listen_port, rules)
        started = time.time()
        seen: list[float] = []
        until, i = time.monotonic() + 3 * HOLD + REPLAY_WINDOW, 0
        traffic = fresh + measured
        while i < len(traffic) or time.monotonic() < until:
            spec.client.chat(traffic[i % len(traffic)], max_tokens=REPLAY_TOKENS, temperature=0.0, seed=1,
                             cache_prompt=False)
            i += 1
            value = live_value(exp)
            if value is not None:
                seen.append(value)
        time.sleep(3)  # the last scrapes and rule evaluations
        ended = time.time()
        assert seen, "no live prediction on the edits"
        result = evaluate(prom, started, ended, str(rules), step=1.0)
        verdicts = {r["alert"]: r for r in result["rules"]}
        quiet = {a: verdicts[a] for a in LIVE_ALERTS}
        assert all(v["error"] is None for v in quiet.values()), result
        text = exp.exposition().decode()
        print(f"\nlive prediction on {i} requests (6 new edits, then the tune's own): {min(seen):.3f}-{max(seen):.3f}, "
              f"the tune's figure {model.measured:.3f}, band now [{series(text, 'specops_tune_live_band_low')}, "
              f"{series(text, 'specops_tune_live_band_high')}]; "
              + ", ".join(f"{a} true {v['condition_true_s']:.0f} s" for a, v in quiet.items()))
        traffic_alert = quiet["SpecopsTuneTrafficChanged"]
        assert not traffic_alert["would_fire"] and "firing" not in traffic_alert["recorded_states"], traffic_alert
        # the loss alert: quiet where the profile pays on its own requests; where it loses there (this CPU prices
        # drafting dear: ngram-simple read 0.87-0.88 on SmolLM2 here), a window confidently below 1 is the truth
        # about that traffic, and the alert may say so
        if model.measured >= 1.0:
            assert not quiet["SpecopsTuneLivePredictsLoss"]["would_fire"], quiet
    finally:
        exp.shutdown()
