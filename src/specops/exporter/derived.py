"""The exporter's derived series: acceptance ratio, mean acceptance length, per-position acceptance and
decode tokens/s over its window, computed from one consistent snapshot per pass.

A pass is *good* when ``/metrics`` was read whole and none of the counters the figures use was invalid,
and the speculative counters are all there or all absent. A pass that is not good restarts the window for
every counter (the issue-13 ratio of 278 came from a window that skipped a bad pass for one counter and not
the other); so does any counter going backwards (:class:`~specops.exporter.window.CounterWindow`). Ratios
of shares are clamped to [0, 1] by construction, and no figure exists without two good passes within
twice the window: a stale number while the server is down is worse than none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specops.exporter.llama_metrics import PER_POS_NAME, SPEC_KEYS, ServerMetrics
from specops.exporter.window import CounterWindow

DRAFT_TOKENS, ACCEPTED, DRAFTS = SPEC_KEYS
PREDICTED = "llamacpp_tokens_predicted_total"
PREDICTED_SECONDS = "llamacpp_tokens_predicted_seconds_total"
DECODE = (PREDICTED, PREDICTED_SECONDS)
_POS = "pos"


@dataclass(frozen=True)
class WindowFigures:
    acceptance_ratio: float | None = None
    mean_acceptance_length: float | None = None
    decode_tokens_per_second: float | None = None
    acceptance_by_position: dict[int, float] = field(default_factory=dict)
    valid_until: float = float("-inf")  # monotonic time after which these figures are too old to show

    def live(self, now: float) -> bool:
        return now <= self.valid_until


def pass_values(metrics: ServerMetrics | None, spec: dict[str, float], spec_source: str) -> dict[str, float] | None:
    """The counters of one pass for the window, or None when the pass is not good."""
    if metrics is None or metrics.spec_counters_partial:
        return None
    if metrics.invalid_names & {*DECODE, *SPEC_KEYS, PER_POS_NAME}:
        return None
    values = {k: metrics.counters[k] for k in DECODE if k in metrics.counters}
    values.update(spec)
    if spec_source == "metrics":
        values.update({f"{_POS}{p}": v for p, v in metrics.accepted_per_pos.items()})
    return values


def _share(n: float | None) -> float | None:
    return None if n is None else min(1.0, max(0.0, n))


class DerivedSeries:
    """Feeds the window one pass at a time and reads the figures back."""

    def __init__(self, window_seconds: float) -> None:
        self.window = CounterWindow(window_seconds)

    def update(self, now: float, values: dict[str, float] | None, source: str, restarted: bool) -> WindowFigures:
        if values is None:
            self.window.restart()
            return WindowFigures()
        self.window.observe(now, values, source, reset=restarted)
        valid_until = self.window.live_until()
        if valid_until < now:
            return WindowFigures()
        w = self.window
        drafts_ratio = w.ratio(ACCEPTED, DRAFTS)
        per_pos: dict[int, float] = {}
        for key in values:
            if key.startswith(_POS):
                r = _share(w.ratio(key, DRAFTS))
                if r is not None:
                    per_pos[int(key.removeprefix(_POS))] = r
        return WindowFigures(
            acceptance_ratio=_share(w.ratio(ACCEPTED, DRAFT_TOKENS)),
            mean_acceptance_length=None if drafts_ratio is None else 1.0 + drafts_ratio,
            decode_tokens_per_second=w.ratio(PREDICTED, PREDICTED_SECONDS),
            acceptance_by_position=per_pos,
            valid_until=valid_until,
        )
