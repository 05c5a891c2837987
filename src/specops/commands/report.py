"""``specops report``: the morning report — what the Grafana dashboard shows over the last hours, from Prometheus."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from specops.soak.alerts import parse_duration
from specops.watch import dashboard, query, report

NAME = "report"
HELP = "read Prometheus over a window, write reports/watch-<UTC time>.md + PNGs of the dashboard's panels"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", default="12h", help="window ending now: 30m, 12h, 1d, 1h30m (default %(default)s)")
    p.add_argument("--prometheus", default="http://127.0.0.1:9090", help="Prometheus base URL (default %(default)s)")
    p.add_argument("--instance", default=".+", help="regex for the dashboard's $instance (default: all)")
    p.add_argument("--dashboard", type=Path, default=dashboard.DASHBOARD,
                   help="Grafana dashboard JSON the panels come from (default: the repository's)")
    p.add_argument("--report-dir", type=Path, default=Path("reports"), help="default %(default)s")
    p.add_argument("--timeout", type=float, default=30.0, help="per HTTP request, seconds (default %(default)s)")


def since_seconds(text: str) -> float:
    try:
        value = parse_duration(text.strip())
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ValueError(f"bad --since {text!r}: want a positive duration such as 30m, 12h, 1d")
    return value


def fail(message: str) -> int:
    sys.stderr.write(f"specops report: {message}\n")
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        range_s = since_seconds(args.since)
    except ValueError as exc:
        return fail(str(exc))
    if importlib.util.find_spec("matplotlib") is None:
        return fail("matplotlib is needed for the plots (pip install 'specops[bench]')")
    end = time.time()
    start = end - range_s
    step = query.step_for(range_s)
    variables = dashboard.grafana_vars(range_s, step, args.instance)
    try:
        panels = dashboard.load(args.dashboard)
        shown = dashboard.select(panels, dashboard.RANGE_PANELS, variables)
        restarts, tuned = dashboard.select(panels, (dashboard.RESTARTS_IN_RANGE, dashboard.TUNED_PROFILE), variables)
    except dashboard.DashboardError as exc:
        return fail(str(exc))
    prom = query.Prometheus(args.prometheus, timeout=args.timeout)
    try:
        watch = query.collect(prom, shown, restarts, start, end, step, tuned)
    except query.PrometheusError as exc:
        return fail(str(exc))
    finally:
        prom.close()
    stamp = datetime.fromtimestamp(end, UTC).strftime("%Y%m%dT%H%M%SZ")
    written = report.write(watch, args.report_dir, stamp, args.dashboard.name)
    for path in written:
        sys.stdout.write(f"wrote {path}\n")
    return 0
