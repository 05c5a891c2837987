"""Per-minute series from the finished requests: decode tokens/s, acceptance, requests, errors."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specops.soak.accounting import RequestRecord


@dataclass
class Bucket:
    index: int
    start: float  # seconds since the start of the soak
    requests_ok: int = 0
    attempt_errors: int = 0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_accepted: int = 0
    faults: int = 0

    @property
    def decode_tps(self) -> float | None:
        """Server-side decode rate over this bucket's requests (sum of tokens / sum of decode time)."""
        return self.predicted_n / self.predicted_ms * 1000.0 if self.predicted_ms > 0 else None

    @property
    def acceptance(self) -> float | None:
        return self.draft_accepted / self.draft_n if self.draft_n > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["decode_tps"] = None if self.decode_tps is None else round(self.decode_tps, 3)
        d["acceptance"] = None if self.acceptance is None else round(self.acceptance, 4)
        return d


def build(records: list[RequestRecord], duration: float, fault_times: list[float] | None = None,
          width: float = 60.0) -> list[Bucket]:
    """Buckets of ``width`` seconds covering ``[0, duration]``; a request counts where it ended."""
    if width <= 0:
        raise ValueError("bucket width must be > 0")
    last_end = max([duration, *(r.end for r in records)], default=duration)
    n = max(1, int(last_end // width) + 1)
    buckets = [Bucket(i, i * width) for i in range(n)]

    def at(t: float) -> Bucket:
        return buckets[min(n - 1, max(0, int(t // width)))]

    for r in records:
        for a in r.attempts:
            if not a.ok:
                at(a.end).attempt_errors += 1
        if r.outcome in ("succeeded", "retried_then_succeeded"):
            b = at(r.end)
            b.requests_ok += 1
            b.predicted_n += r.predicted_n
            b.predicted_ms += r.predicted_ms
            b.draft_n += r.draft_n
            b.draft_accepted += r.draft_accepted
    for t in fault_times or []:
        at(t).faults += 1
    return buckets
