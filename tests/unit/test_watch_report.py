"""``specops report`` against an in-process fake Prometheus returning canned query_range / query JSON."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from specops import cli
from specops.watch import dashboard

A, B = "hosta:9840", "hostb:9840"
# hosta's deploy tuned (the dashboard's "Tuned profile": each figure joined with specops_tune_info's labels); hostb's
# did not. The live prediction (issue 52 item 3) is the panel's mean over the window, absent while plain decoding is
# served or without traffic (FakeProm.live False)
TUNE_LABELS = {"instance": A, "job": "specops-exporter", "chosen": "exact-n8", "spec_type": "draft-simple",
               "when": "2026-11-27T06:00:00+0000", "reused": "false"}
TUNE_FIGURES = {"specops_tune_draft_n_max": "8", "specops_tune_measured_speedup": "1.1",
                "specops_tune_measured_speedup_low": "1.08", "specops_tune_measured_speedup_high": "1.11",
                "specops_tune_live_predicted_speedup": "1.034"}
LIVE = "specops_tune_live_predicted_speedup"


def first_series(expr: str) -> str:
    """The series a dashboard target selects first (``avg_over_time(x{...}[...]) * ...`` selects x)."""
    m = re.search(r"([A-Za-z_:][\w:]*)\s*\{", expr)
    return m.group(1) if m else expr


def matrix(instance: str, values: list[float], extra: dict | None = None) -> dict:
    now = time.time()
    n = len(values)
    return {"metric": {"instance": instance, **(extra or {})},
            "values": [[now - 60 * (n - i), str(v)] for i, v in enumerate(values)]}


class FakeProm(BaseHTTPRequestHandler):
    queries: ClassVar[list[str]] = []
    live: ClassVar[bool] = True  # hosta's live traffic gives a prediction

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        q = parse_qs(url.query).get("query", [""])[0]
        FakeProm.queries.append(q)
        if url.path == "/api/v1/query":
            data = {"resultType": "vector", "result": self.instant(q)}
        elif url.path == "/api/v1/query_range":
            data = {"resultType": "matrix", "result": self.series(q)}
        else:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    @staticmethod
    def instant(q: str) -> list[dict]:
        if "restarts" in q:
            return [{"metric": {"instance": A}, "value": [time.time(), "2"]}]
        name = first_series(q)
        figure = TUNE_FIGURES.get(name) if name != LIVE or FakeProm.live else None
        return [{"metric": TUNE_LABELS, "value": [time.time(), figure]}] if figure else []

    @staticmethod
    def series(q: str) -> list[dict]:
        if q.startswith("ALERTS"):
            now = time.time()
            step = 60  # ≥ the report's step for --since 12h: two runs separated by a gap
            alert = {"alertname": "SpeculationNotPaying", "instance": A, "severity": "warning",
                     "alertstate": "firing"}
            vals = [[now - 3600 + step * i, "1"] for i in range(5)] + [[now - 600, "1"]]
            return [{"metric": alert, "values": vals}]
        if "acceptance_ratio" in q:
            return [matrix(A, [0.5, 0.75, 0.75]), matrix(B, [0.25, 0.25])]
        if "plain_decode" in q:
            return [matrix(A, [11.0, 11.0, 11.0])]
        if "decode_tokens_per_second" in q:
            return [matrix(A, [10.0, 12.0, 14.0])]
        if "resident_memory" in q:
            return [matrix(A, [2**30, 2**30]), matrix(B, [2**29])]
        if "mean_acceptance_length" in q:
            return [matrix(A, [2.0, "NaN"])]  # type: ignore[list-item]
        return []  # anonymous memory, restarts, scrape errors, break-even: nothing


@pytest.fixture
def prom() -> Iterator[str]:
    FakeProm.queries = []
    FakeProm.live = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeProm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=30)


def report(tmp_path: Path, *argv: str) -> int:
    return cli.main(["report", "--report-dir", str(tmp_path / "reports"), *argv])


def test_report_writes_markdown_and_one_png_per_instance(prom: str, tmp_path: Path, capsys) -> None:
    assert report(tmp_path, "--since", "12h", "--prometheus", prom) == 0
    files = sorted(p.name for p in (tmp_path / "reports").iterdir())
    md_name = next(f for f in files if f.endswith(".md"))
    assert md_name.startswith("watch-") and md_name.endswith("Z.md")
    stamp = md_name[len("watch-"):-len(".md")]
    assert files == sorted([md_name, f"watch-{stamp}-hosta_9840.png", f"watch-{stamp}-hostb_9840.png"])
    for png in (f for f in files if f.endswith(".png")):
        assert (tmp_path / "reports" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "reports" / md_name).read_text()
    assert f"## {A}" in md and f"## {B}" in md
    assert f"![{A}](watch-{stamp}-hosta_9840.png)" in md
    assert f"| {A} | 75.0 % | 50.0 % | 66.7 % | 75.0 % | 3 |" in md  # acceptance: last, min, mean, max
    assert f"| {A} | 14 | 10 | 12 | 14 | 3 |" in md  # decode tokens/s
    assert f"| {A} plain (speed gate) | 11 | 11 | 11 | 11 | 3 |" in md
    assert f"| {A} RSS | 1024.0 MiB |" in md
    assert f"| {A} | 2 | 2 | 2 | 2 | 1 |" in md  # mean acceptance length: the NaN sample is dropped
    assert "Restarts in the window: 2" in md
    assert "wrote " in capsys.readouterr().out


def test_missing_series_say_no_data_never_a_number(prom: str, tmp_path: Path) -> None:
    assert report(tmp_path, "--prometheus", prom) == 0
    md = next((tmp_path / "reports").glob("*.md")).read_text()
    section_b = md.split(f"## {B}")[1].split("## Alerts")[0]
    assert f"| {B} plain (speed gate) | no data |" in section_b
    assert f"| {B} | no data |" in section_b  # decode tokens/s, mean acceptance length
    assert f"| {B} anonymous | no data |" in section_b
    assert "Restarts in the window: no data" in section_b
    section_a = md.split(f"## {A}")[1].split(f"## {B}")[0]
    assert f"| {A} anonymous | no data |" in section_a
    scrape = section_a.split("Scrape errors")[1]
    assert scrape.splitlines()[1] == f"| {A} | no data | | | | |"  # unknown labels of the legend dropped
    assert "{{" not in md


def test_the_tuned_profile_of_each_instance_or_no_data(prom: str, tmp_path: Path) -> None:
    assert report(tmp_path, "--prometheus", prom) == 0
    md = next((tmp_path / "reports").glob("*.md")).read_text()
    section_a = md.split(f"## {A}")[1].split(f"## {B}")[0]
    section_b = md.split(f"## {B}")[1].split("## Alerts")[0]
    assert ("Tuned profile (the deploy's auto-tune): exact-n8, draft length 8, measured 1.10× [1.08, 1.11] vs plain "
            "decoding, tuned 2026-11-27T06:00:00+0000, reused: no; live traffic predicts 1.03× (mean over the "
            "window)\n") in section_a
    assert "Tuned profile (the deploy's auto-tune): no data\n" in section_b


def test_no_live_prediction_is_said_never_a_zero(prom: str, tmp_path: Path) -> None:
    FakeProm.live = False  # plain decoding served, or no traffic in the window: the series is absent
    assert report(tmp_path, "--prometheus", prom) == 0
    md = next((tmp_path / "reports").glob("*.md")).read_text()
    section_a = md.split(f"## {A}")[1].split(f"## {B}")[0]
    assert ("Tuned profile (the deploy's auto-tune): exact-n8, draft length 8, measured 1.10× [1.08, 1.11] vs plain "
            "decoding, tuned 2026-11-27T06:00:00+0000, reused: no; live traffic: no prediction (plain decoding "
            "served, no traffic, or a record without the tune's model)\n") in section_a
    assert "predicts 0" not in md and "0.00×" not in md


def test_the_tuned_profile_says_only_what_its_series_say() -> None:
    from specops.watch.query import TUNE_DRAFT_N_MAX, TUNE_LIVE, TUNE_SPEEDUP, Tuned
    from specops.watch.report import tuned_line

    plain = Tuned({"chosen": "plain", "when": "2026-11-27T06:00:00+0000", "reused": "true"}, {TUNE_SPEEDUP: 1.0})
    assert tuned_line(plain) == ("Tuned profile (the deploy's auto-tune): plain, measured 1.00× (no interval) vs "
                                 "plain decoding, tuned 2026-11-27T06:00:00+0000, reused: yes; live traffic: no "
                                 "prediction (plain decoding served, no traffic, or a record without the tune's model)")
    unmeasured = Tuned({"chosen": "exact-n4"}, {TUNE_DRAFT_N_MAX: 4.0})
    assert tuned_line(unmeasured) == ("Tuned profile (the deploy's auto-tune): exact-n4, draft length 4, not "
                                      "measured, tuned unknown, reused: unknown")  # nothing measured: no live word
    assert tuned_line(None) == "Tuned profile (the deploy's auto-tune): no data"
    own = Tuned({"chosen": "exact-ngram-simple", "when": "2026-11-27T06:00:00+0000", "reused": "false",
                 "tasks": "edits.jsonl (sha256 0123456789abcdef)", "mix": "edit 70%, prose 30%"}, {TUNE_SPEEDUP: 1.2})
    assert tuned_line(own) == ("Tuned profile (the deploy's auto-tune): exact-ngram-simple, measured 1.20× (no "
                               "interval) vs plain decoding, tuned 2026-11-27T06:00:00+0000, on edits.jsonl (sha256 "
                               "0123456789abcdef) (edit 70%, prose 30%), reused: no; live traffic: no prediction "
                               "(plain decoding served, no traffic, or a record without the tune's model)")
    live = Tuned({"chosen": "exact-n4", "when": "2026-11-27T06:00:00+0000", "reused": "false"},
                 {TUNE_SPEEDUP: 1.2, TUNE_LIVE: 0.968})
    assert tuned_line(live) == ("Tuned profile (the deploy's auto-tune): exact-n4, measured 1.20× (no interval) vs "
                                "plain decoding, tuned 2026-11-27T06:00:00+0000, reused: no; live traffic predicts "
                                "0.97× (mean over the window)")


def test_alerts_that_fired_with_their_times(prom: str, tmp_path: Path) -> None:
    assert report(tmp_path, "--prometheus", prom) == 0
    md = next((tmp_path / "reports").glob("*.md")).read_text()
    alerts = md.split("## Alerts that fired")[1]
    rows = [line for line in alerts.splitlines() if line.startswith("| SpeculationNotPaying")]
    assert len(rows) == 2, alerts  # the gap splits the two firings
    assert all(f"| {A} | warning | " in r and r.count(" UTC") == 2 for r in rows)
    assert "still firing" not in alerts


def test_queries_come_from_the_dashboard_with_grafana_variables_substituted(prom: str, tmp_path: Path) -> None:
    assert report(tmp_path, "--prometheus", prom, "--since", "1h") == 0
    panels = dashboard.load()
    variables = dashboard.grafana_vars(3600, 15)
    expected = {t.expr for p in dashboard.select(panels, dashboard.RANGE_PANELS, variables) for t in p.targets}
    assert expected <= set(FakeProm.queries)
    (tuned,) = dashboard.select(panels, (dashboard.TUNED_PROFILE,), variables)
    assert {t.expr for t in tuned.targets} <= set(FakeProm.queries)
    assert {first_series(t.expr) for t in tuned.targets} == set(TUNE_FIGURES)  # one target per figure
    # the live prediction is the mean over the report's window
    assert any(q.startswith(f'avg_over_time({LIVE}{{instance=~".+"}}[3600s])') for q in FakeProm.queries)
    assert not any("$" in q for q in FakeProm.queries)
    assert any('increase(llamacpp_systemd_restarts_total{instance=~".+"}[3600s])' in q for q in FakeProm.queries)


@pytest.mark.parametrize("since", ["abc", "-1h", "0h", "12", ""])
def test_bad_since_is_one_line_exit_2_nothing_written(since: str, tmp_path: Path, capsys) -> None:
    assert report(tmp_path, f"--since={since}", "--prometheus", "http://127.0.0.1:9") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--since" in err
    assert not (tmp_path / "reports").exists()


def test_unreachable_prometheus_is_one_line_exit_2_nothing_written(tmp_path: Path, capsys) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert report(tmp_path, "--prometheus", f"http://127.0.0.1:{port}") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach Prometheus" in err
    assert not (tmp_path / "reports").exists()


def test_every_report_panel_is_on_the_dashboard() -> None:
    panels = dashboard.load()
    for title in (*dashboard.RANGE_PANELS, dashboard.RESTARTS_IN_RANGE, dashboard.TUNED_PROFILE):
        assert title in panels


def test_a_panel_with_many_series_folds_those_that_stayed_at_zero() -> None:
    from specops.watch.query import FOLD_AFTER, Series, shown

    quiet = [Series(0, f"k{i}", {"instance": "h:9840"}, [(0.0, 0.0), (15.0, 0.0)]) for i in range(FOLD_AFTER)]
    busy = Series(0, "busy", {"instance": "h:9840"}, [(0.0, 0.0), (15.0, 0.2)])
    keep, folded = shown([*quiet, busy])
    assert keep == [busy] and folded == FOLD_AFTER
    assert shown(quiet) == (quiet, 0)  # few series: every one is shown, zeros included
