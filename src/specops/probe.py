"""Judge a probe completion: did speculation really happen? (used by deploy and `specops verify`)."""

from __future__ import annotations

from typing import Any

from specops.client import SPEC_ACCEPTED_TOKENS, SPEC_DRAFT_TOKENS, SPEC_DRAFTS, metric_value, parse_metrics


def summarize_probe(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw``: metrics_before/metrics_after (Prometheus text), slots (list), timings (dict)."""
    before = parse_metrics(raw.get("metrics_before") or "")
    after = parse_metrics(raw.get("metrics_after") or "")

    def delta(name: str) -> float:
        return (metric_value(after, name) or 0.0) - (metric_value(before, name) or 0.0)

    drafted, accepted, drafts = delta(SPEC_DRAFT_TOKENS), delta(SPEC_ACCEPTED_TOKENS), delta(SPEC_DRAFTS)
    slots = raw.get("slots") or []
    timings = raw.get("timings") or {}
    counted_by = "metrics"
    if metric_value(after, SPEC_DRAFT_TOKENS) is None and timings.get("draft_n") is not None:
        # builds without the speculation counters in /metrics (4227c9be4): the probe completion's own timings
        drafted, accepted, drafts = float(timings["draft_n"]), float(timings.get("draft_n_accepted") or 0), 0.0
        counted_by = "timings"
    return {
        "counted_by": counted_by,
        "draft_tokens_delta": int(drafted),
        "accepted_tokens_delta": int(accepted),
        "drafts_delta": int(drafts),
        "acceptance": accepted / drafted if drafted else 0.0,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "slots_speculative": bool(slots) and all(bool(s.get("speculative")) for s in slots),
        "predicted_per_second": float(timings.get("predicted_per_second") or 0.0),
        "content": raw.get("content", ""),
        # where the proof came from: probe (our own completion), traffic (the service's own requests moved the
        # speculation counters), earlier (the same process's proof at an earlier deploy, the unit unchanged: its
        # counters then to now), unproven (busy, no answer within the deadline: reason says why)
        "source": str(raw.get("source") or "probe"),
        "since": str(raw.get("since") or ""),
        "seconds": float(raw.get("seconds") or 0.0),
        "reason": str(raw.get("reason") or ""),
    }
