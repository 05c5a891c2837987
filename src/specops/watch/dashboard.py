"""The report's panels, taken from the Grafana dashboard JSON (single source of truth for the PromQL).

Grafana variables are substituted the way the monitoring integration test does (``GRAFANA_VARS``), with the
values for this report's window and step.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[3] / "configs" / "grafana" / "dashboards" / "specops-llama-server.json"

# what the report shows, by dashboard panel title (in order)
RANGE_PANELS = (
    "Draft acceptance vs this host's break-even",
    "Mean acceptance length",
    "Decode speed vs plain decoding on this host",
    "Resident memory",
    "Restarts",
    "Scrape errors /s by endpoint and kind",
)
RESTARTS_IN_RANGE = "Restarts in range"  # stat panel, evaluated once at the end of the window
TUNED_PROFILE = "Tuned profile"  # stat panel (the deploy's auto-tune), evaluated once at the end of the window
SCRAPE_INTERVAL_S = 15.0  # Prometheus' default; Grafana's $__rate_interval needs it


class DashboardError(Exception):
    pass


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[Target, ...]


def grafana_vars(range_s: float, step_s: float, instance: str = ".+") -> dict[str, str]:
    """``$__rate_interval`` as Grafana computes it: max(step + scrape interval, 4 × scrape interval)."""
    rate = max(step_s + SCRAPE_INTERVAL_S, 4 * SCRAPE_INTERVAL_S)
    return {"$__rate_interval": f"{math.ceil(rate)}s", "$__range": f"{math.ceil(range_s)}s",
            "$__interval": f"{math.ceil(step_s)}s", "$instance": instance}


def substitute(expr: str, variables: dict[str, str]) -> str:
    for var in sorted(variables, key=len, reverse=True):  # $__range before a hypothetical $__r
        expr = expr.replace(var, variables[var])
    if "$" in expr:
        raise DashboardError(f"unsubstituted Grafana variable in {expr!r}")
    return expr


def load(path: Path = DASHBOARD) -> dict[str, Panel]:
    """Every non-row panel by title, with its raw (unsubstituted) targets."""
    try:
        dash = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DashboardError(f"cannot read the dashboard {path}: {exc}") from exc
    panels: dict[str, Panel] = {}
    for p in dash.get("panels", []):
        if p.get("type") == "row":
            continue
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        targets = tuple(Target(t["expr"], t.get("legendFormat", "")) for t in p.get("targets", []))
        panels[p["title"]] = Panel(p["title"], unit, targets)
    return panels


def select(panels: dict[str, Panel], titles: tuple[str, ...], variables: dict[str, str]) -> list[Panel]:
    out = []
    for title in titles:
        if title not in panels:
            raise DashboardError(f"the dashboard has no panel {title!r}")
        p = panels[title]
        out.append(Panel(p.title, p.unit, tuple(Target(substitute(t.expr, variables), t.legend) for t in p.targets)))
    return out
