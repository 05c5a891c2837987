"""Would the alert rules have fired during the soak? Asked of a real Prometheus (optional).

Two views over the run window: ``ALERTS`` as Prometheus recorded it (pending/firing), and — with the
rules file — each rule's expression evaluated with ``query_range``: when its condition held, and whether
it held for the rule's ``for:`` (the longest unbroken stretch at the query step).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

_DUR = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str | None) -> float:
    if not text:
        return 0.0
    total = 0.0
    pos = 0
    for m in _DUR.finditer(text):
        if m.start() != pos:
            raise ValueError(f"bad duration {text!r}")
        total += int(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError(f"bad duration {text!r}")
    return total


@dataclass
class RuleVerdict:
    alert: str
    for_s: float
    condition_true_s: float = 0.0  # longest unbroken stretch the expression returned something
    first_true: float | None = None  # unix time
    would_fire: bool = False
    recorded_states: list[str] = field(default_factory=list)  # from ALERTS: pending / firing
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_rules(path: str | Path) -> list[tuple[str, str, float]]:
    import yaml  # only needed with a rules file

    data = yaml.safe_load(Path(path).read_text())
    out = []
    for group in (data or {}).get("groups", []):
        for rule in group.get("rules", []):
            if "alert" in rule:
                out.append((rule["alert"], str(rule["expr"]), parse_duration(rule.get("for"))))
    return out


def longest_run(timestamps: list[float], step: float) -> float:
    """Longest stretch of consecutive timestamps (gaps of at most one step) in seconds."""
    if not timestamps:
        return 0.0
    ts = sorted(set(timestamps))
    best = cur = 0.0
    for a, b in itertools.pairwise(ts):
        cur = cur + (b - a) if b - a <= step * 1.5 else 0.0
        best = max(best, cur)
    return best


class Prometheus:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        resp = self._http.get("/api/v1/query_range",
                              params={"query": expr, "start": start, "end": end, "step": step})
        body = resp.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
        return list(body["data"]["result"])


def evaluate(url: str, start: float, end: float, rules_file: str | None = None,
             step: float = 15.0) -> dict[str, Any]:
    """Verdicts per alert over ``[start, end]`` (unix seconds)."""
    prom = Prometheus(url)
    verdicts: dict[str, RuleVerdict] = {}
    result: dict[str, Any] = {"url": url, "start": start, "end": end, "step": step}
    try:
        try:
            for series in prom.query_range("ALERTS", start, end, step):
                name = series["metric"].get("alertname", "?")
                state = series["metric"].get("alertstate", "?")
                v = verdicts.setdefault(name, RuleVerdict(name, 0.0))
                if state not in v.recorded_states:
                    v.recorded_states.append(state)
        except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
            result["alerts_error"] = f"{type(exc).__name__}: {exc}"
        if rules_file:
            for name, expr, for_s in load_rules(rules_file):
                v = verdicts.setdefault(name, RuleVerdict(name, for_s))
                v.for_s = for_s
                try:
                    series = prom.query_range(expr, start, end, step)
                except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
                    v.error = f"{type(exc).__name__}: {exc}"
                    continue
                stamps = [float(p[0]) for s in series for p in s.get("values", [])]
                v.condition_true_s = longest_run(stamps, step)
                v.first_true = min(stamps) if stamps else None
                v.would_fire = bool(stamps) and v.condition_true_s >= for_s
        for v in verdicts.values():
            if "firing" in v.recorded_states:
                v.would_fire = True
    finally:
        prom.close()
    result["rules"] = [v.to_dict() for v in sorted(verdicts.values(), key=lambda v: v.alert)]
    return result
