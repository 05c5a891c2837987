"""Read the report's data from Prometheus' HTTP API (query_range, query, the ALERTS series)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from specops.watch.dashboard import Panel

MAX_POINTS = 720  # per series: a 12 h window at one point a minute
# The figures of the dashboard's "Tuned profile" panel, by the first series each of its targets selects
TUNE_DRAFT_N_MAX = "specops_tune_draft_n_max"
TUNE_SPEEDUP = "specops_tune_measured_speedup"
TUNE_SPEEDUP_LOW = "specops_tune_measured_speedup_low"
TUNE_SPEEDUP_HIGH = "specops_tune_measured_speedup_high"
# what the tune's cost model predicts on the live traffic (issue 52 item 3): the panel's target is its mean over the
# window (avg_over_time over $__range); absent, never 0, while plain decoding is served or without traffic
TUNE_LIVE = "specops_tune_live_predicted_speedup"


class PrometheusError(Exception):
    pass


def step_for(range_s: float) -> float:
    return float(max(15, math.ceil(range_s / MAX_POINTS)))


def legend(fmt: str, labels: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    return text or "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _points(values: list[list[Any]]) -> list[tuple[float, float]]:
    out = []
    for t, v in values:
        x = float(v)
        if math.isfinite(x):
            out.append((float(t), x))
    return out


@dataclass
class Series:
    target: int  # index into the panel's targets
    name: str  # the panel's legend with the labels filled in
    labels: dict[str, str]
    points: list[tuple[float, float]]  # (unix time, value), finite values only

    @property
    def instance(self) -> str:
        return self.labels.get("instance", "?")

    @property
    def zero(self) -> bool:
        """0 at every point (an error counter's rate that never moved)."""
        return all(v == 0 for _, v in self.points)


FOLD_AFTER = 4  # a panel with more series than this for one instance folds those that stayed at 0


def shown(series: list[Series]) -> tuple[list[Series], int]:
    """The series worth a line or a row, and how many were folded for staying at 0 throughout."""
    if len(series) <= FOLD_AFTER:
        return series, 0
    keep = [s for s in series if not s.zero]
    return keep, len(series) - len(keep)


@dataclass
class PanelData:
    panel: Panel
    series: list[Series] = field(default_factory=list)


@dataclass
class Alert:
    name: str
    instance: str
    severity: str
    start: float
    end: float  # the last sample seen firing
    ongoing: bool  # still firing at the end of the window


@dataclass
class Tuned:
    """One instance's tuned profile at the end of the window (the dashboard's "Tuned profile" panel)."""

    labels: dict[str, str]  # specops_tune_info's: chosen, spec_type, when, reused (and instance, job)
    figures: dict[str, float] = field(default_factory=dict)  # by series: TUNE_DRAFT_N_MAX, TUNE_SPEEDUP, TUNE_LIVE...


@dataclass
class Watch:
    url: str
    start: float
    end: float
    step: float
    panels: list[PanelData]
    restarts: dict[str, float]  # instance -> increase over the window (the dashboard's "Restarts in range")
    alerts: list[Alert]
    tuned: dict[str, Tuned] = field(default_factory=dict)  # instance -> its tuned profile at the end, if any

    @property
    def instances(self) -> list[str]:
        names = {s.instance for p in self.panels for s in p.series} | set(self.restarts) | set(self.tuned)
        names |= {a.instance for a in self.alerts if a.instance != "?"}
        return sorted(names)


class Prometheus:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        try:
            resp = self._http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {exc or type(exc).__name__}") from exc
        try:
            body = resp.json()
        except ValueError as exc:
            raise PrometheusError(f"{self.url}{path} answered HTTP {resp.status_code}, not Prometheus JSON") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error") if isinstance(body, dict) else body
            raise PrometheusError(f"{self.url}{path} failed (HTTP {resp.status_code}): {err}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step})
        return list(data.get("result") or [])

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", {"query": expr, "time": at})
        return list(data.get("result") or [])


def alerts_from(series: list[dict[str, Any]], step: float, end: float) -> list[Alert]:
    """Firing intervals from ``ALERTS{alertstate="firing"}``: samples further apart than 1.5 steps split them."""
    out = []
    for s in series:
        m = s.get("metric", {})
        times = sorted(t for t, _ in _points(s.get("values", [])))
        run: list[float] = []
        for t in [*times, math.inf]:
            if run and t - run[-1] > step * 1.5:
                out.append(Alert(m.get("alertname", "?"), m.get("instance", "?"), m.get("severity", ""),
                                 run[0], run[-1], ongoing=end - run[-1] <= step * 1.5))
                run = []
            run.append(t)
    return sorted(out, key=lambda a: (a.start, a.name, a.instance))


def tuned_at(prom: Prometheus, panel: Panel, at: float) -> dict[str, Tuned]:
    """Each instance's tuned profile at ``at``: the panel's figures (a target's first series selector names which:
    ``avg_over_time(specops_tune_live_predicted_speedup{...}[...])`` is TUNE_LIVE), and the info's labels they
    carry. An instance without the series has none (no number rather than a made-up one)."""
    out: dict[str, Tuned] = {}
    for t in panel.targets:
        m = re.search(r"([A-Za-z_:][\w:]*)\s*\{", t.expr) or re.match(r"\s*(\w+)", t.expr)
        name = m.group(1) if m else t.expr
        for s in prom.query(t.expr, at):
            labels = {k: str(v) for k, v in s.get("metric", {}).items()}
            v = float(s["value"][1])
            if math.isfinite(v):
                out.setdefault(labels.get("instance", "?"), Tuned(labels)).figures[name] = v
    return out


def collect(prom: Prometheus, panels: list[Panel], restarts: Panel, start: float, end: float,
            step: float, tuned: Panel | None = None) -> Watch:
    data = []
    for p in panels:
        pd = PanelData(p)
        for i, t in enumerate(p.targets):
            for s in prom.query_range(t.expr, start, end, step):
                labels = {k: str(v) for k, v in s.get("metric", {}).items()}
                pts = _points(s.get("values", []))
                if pts:
                    pd.series.append(Series(i, legend(t.legend, labels), labels, pts))
        data.append(pd)
    increases: dict[str, float] = {}
    for t in restarts.targets:
        for s in prom.query(t.expr, end):
            v = float(s["value"][1])
            if math.isfinite(v):
                increases[s.get("metric", {}).get("instance", "?")] = v
    alerts = alerts_from(prom.query_range('ALERTS{alertstate="firing"}', start, end, step), step, end)
    return Watch(prom.url, start, end, step, data, increases, alerts, tuned_at(prom, tuned, end) if tuned else {})
