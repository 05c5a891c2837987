"""Memory trend: least-squares slope in MB/hour, per server process (a restart starts a new segment).

Two series per sample: RSS, and anonymous memory (RSS minus file-backed pages). The model weights are mmapped,
so RSS also grows while new tokens page in rows of the embedding table: not a leak. Leaks show in anonymous
memory, which is what the soak judges when the platform reports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MB = 1024 * 1024


@dataclass(frozen=True)
class RssSample:
    t: float  # seconds since the start of the soak
    pid: int
    rss_bytes: int
    anon_bytes: int | None = None


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, in value per hour; None with < 2 distinct times."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    return sxy / sxx * 3600.0


@dataclass(frozen=True)
class Segment:
    pid: int
    start: float
    end: float
    samples: int
    first_mb: float
    last_mb: float
    max_mb: float
    slope_mb_per_hour: float | None

    @property
    def span(self) -> float:
        return self.end - self.start


def segments(samples: list[RssSample], attr: str = "rss_bytes") -> list[Segment]:
    """Split samples into runs of one PID (in time order) and fit each (``attr``: rss_bytes or anon_bytes)."""
    out: list[Segment] = []
    run: list[RssSample] = []
    for s in sorted((s for s in samples if getattr(s, attr) is not None), key=lambda s: s.t):
        if run and s.pid != run[-1].pid:
            out.append(_fit(run, attr))
            run = []
        run.append(s)
    if run:
        out.append(_fit(run, attr))
    return out


def _fit(run: list[RssSample], attr: str = "rss_bytes") -> Segment:
    pts = [(s.t, getattr(s, attr) / MB) for s in run]
    return Segment(pid=run[0].pid, start=run[0].t, end=run[-1].t, samples=len(run), first_mb=pts[0][1],
                   last_mb=pts[-1][1], max_mb=max(p[1] for p in pts), slope_mb_per_hour=slope_per_hour(pts))


def summarize(samples: list[RssSample], warmup: float = 0.0, attr: str = "rss_bytes") -> dict[str, Any]:
    """The trend the invariant judges: the longest PID segment, without its first ``warmup`` seconds
    (model pages and caches settle after start-up and after every restart)."""
    usable = [s for s in samples if getattr(s, attr) is not None]
    segs = segments(usable, attr)
    if not segs:
        return {"segments": [], "judged": None, "series": attr}
    longest = max(segs, key=lambda s: s.span)
    steady = [s for s in usable if s.pid == longest.pid and s.t >= longest.start + warmup]
    judged = _fit(steady, attr) if len(steady) >= 2 else None
    return {
        "segments": [_seg_dict(s) for s in segs],
        "judged": _seg_dict(judged) if judged else None,
        "warmup_s": warmup,
        "series": attr,
    }


def _seg_dict(s: Segment) -> dict[str, Any]:
    return {"pid": s.pid, "start": round(s.start, 1), "end": round(s.end, 1), "samples": s.samples,
            "first_mb": round(s.first_mb, 1), "last_mb": round(s.last_mb, 1), "max_mb": round(s.max_mb, 1),
            "slope_mb_per_hour": None if s.slope_mb_per_hour is None else round(s.slope_mb_per_hour, 2),
            "span_s": round(s.span, 1)}
