"""The exporter's derived series: acceptance ratio, mean acceptance length, per-position acceptance and
decode tokens/s over its window, computed from one consistent snapshot per pass.

A pass is *good* when ``/metrics`` was read whole and none of the counters the figures use was invalid,
and the speculative counters are all there or all absent. A pass that is not good restarts the window for
every counter (the issue-13 ratio of 278 came from a window that skipped a bad pass for one counter and not
the other); so does any counter going backwards (:class:`~specops.exporter.window.CounterWindow`). Ratios
of shares are clamped to [0, 1] by construction, and no figure exists without two good passes within
twice the window: a stale number while the server is down is worse than none.

**Impossible counters are refused, not clamped** (:func:`contradiction`). Between two passes of one server,
accepted draft tokens cannot rise more than drafted tokens, verification steps cannot rise more than drafted
tokens nor stay put while tokens are accepted, and no draft position can be accepted more often than there
were steps, nor all positions together more often than tokens were accepted. A pass whose increases break one
of these is counted as an ``invalid_value`` error by the caller and restarts the window without itself: no
figure is ever computed from it (a clamped 1.0 would hide the lie).

**Per-position figures agree with the total** (:func:`positions_disagree`). Every accepted draft token is accepted
at one draft position, so over the window the per-position counters rise by what the accepted total rises by. When
they do not (they stand still while the total rises, or sum to more or less beyond the rounding of llama-server's
printed values), the per-position ratios are withdrawn, not the whole window (the total's own figures stand), and
the caller counts an ``invalid_value`` error, as for a refused pass (issue 51: per-position ratios of 0.0 beside an
acceptance of 0.8, with no error).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from specops.bench.costmodel import Run
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
    # the window's tokens and speculation counters (increases), for the tune's live prediction; None without them
    run: Run | None = None
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


def contradiction(previous: Mapping[str, float], values: Mapping[str, float], source: str) -> str | None:
    """Why the counters of this pass cannot follow ``previous`` on one server, or None when they can.

    ``previous`` is the last good pass of the same counters (no counter went down since, even if bad passes came
    between: the increases then span several intervals, and the same rules hold). The checks on verification
    steps and draft positions apply to the server's own counters only: the log gives steps rounded from
    ``mean len``, so they are approximate there.
    """
    def rise(key: str) -> float | None:
        return values[key] - previous.get(key, 0.0) if key in values else None

    accepted, drafted, steps = rise(ACCEPTED), rise(DRAFT_TOKENS), rise(DRAFTS)
    if accepted is not None and drafted is not None and accepted > drafted:
        return f"accepted tokens rose by {accepted:g} but drafted tokens only by {drafted:g}"
    if source != "metrics" or steps is None:
        return None
    if drafted is not None and steps > drafted:
        return f"verification steps rose by {steps:g} but drafted tokens only by {drafted:g}"
    if accepted and not steps:
        return f"accepted tokens rose by {accepted:g} without a verification step"
    positions = {key: r for key in values if key.startswith(_POS) and (r := rise(key)) is not None}
    over = sorted((int(key.removeprefix(_POS)), r) for key, r in positions.items() if r > steps)
    if over:
        return f"draft position {over[0][0]} accepted {over[0][1]:g} times in {steps:g} verification steps"
    levels = [(previous.get(key, 0.0), values[key]) for key in (ACCEPTED, *positions) if key in values]
    if accepted is not None and sum(positions.values()) - accepted > rounding(levels, accepted):
        return f"accepted tokens by position rose by {sum(positions.values()):g} but accepted tokens by {accepted:g}"
    return None


def printed_error(value: float) -> float:
    """How far a counter's value as llama-server prints it may be from the count: it writes six significant digits
    (C++ ``ostream``'s default), so a count below 10^6 is exact and one above is off by up to half a unit of its
    sixth digit (1234567 reads 1.23457e+06)."""
    v = abs(value)
    return 0.0 if v < 1e6 else 0.5 * 10.0 ** (math.floor(math.log10(v)) - 5)


def rounding(levels: Iterable[tuple[float, float]], rose: float) -> float:
    """How far two sums of increases between these levels (first, last) may differ from the printing alone."""
    return sum(printed_error(a) + printed_error(b) for a, b in levels) + 1e-9 * max(1.0, abs(rose))


def positions_disagree(window: CounterWindow, positions: Iterable[str]) -> str | None:
    """Why the per-position counters' increases over ``window`` cannot add up to the accepted total's, or None
    when they do (within the rounding of the printed values) or there is nothing to compare."""
    total = window.ends(ACCEPTED)
    ends = [e for key in positions if (e := window.ends(key)) is not None]
    if total is None or not ends:
        return None
    rose, by_position = total[1] - total[0], sum(last - first for first, last in ends)
    if abs(by_position - rose) <= rounding((total, *ends), rose):
        return None
    # one wording whatever the numbers (0 when they stood still): the log says it once (statelog.message_key)
    return (f"accepted tokens by position rose by {by_position:g} but accepted tokens by {rose:g} over the window: "
            "per-position acceptance withdrawn")


def window_run(w: CounterWindow) -> Run | None:
    """The window's generated tokens, decode seconds, verification steps, drafted and accepted tokens (increases
    over the same passes); None where a counter is missing or no token was generated."""
    rises = [w.increase(k) for k in (PREDICTED, PREDICTED_SECONDS, DRAFTS, DRAFT_TOKENS, ACCEPTED)]
    if any(r is None for r in rises) or not rises[0]:
        return None
    n, secs, drafts, drafted, accepted = (float(r or 0.0) for r in rises)
    return Run(n, secs, drafts, drafted, accepted)


def _share(n: float | None) -> float | None:
    return None if n is None else min(1.0, max(0.0, n))


class DerivedSeries:
    """Feeds the window one pass at a time and reads the figures back."""

    def __init__(self, window_seconds: float) -> None:
        self.window = CounterWindow(window_seconds)

    def update(self, now: float, values: dict[str, float] | None, source: str,
               restarted: bool) -> tuple[WindowFigures, str | None]:
        """The figures after this pass, and why the pass was refused or a figure withdrawn (None: neither)."""
        if values is None:
            self.window.restart()
            return WindowFigures(), None
        previous = self.window.reference(values, source, reset=restarted)
        problem = contradiction(previous, values, source) if previous is not None else None
        if problem is not None:
            self.window.refuse(values, source)
            return WindowFigures(), problem
        self.window.observe(now, values, source, reset=restarted)
        return self._figures(now, values)

    def _figures(self, now: float, values: dict[str, float]) -> tuple[WindowFigures, str | None]:
        valid_until = self.window.live_until()
        if valid_until < now:
            return WindowFigures(), None
        w = self.window
        drafts_ratio = w.ratio(ACCEPTED, DRAFTS)
        positions = [key for key in values if key.startswith(_POS)]
        withdrawn = positions_disagree(w, positions)
        per_pos: dict[int, float] = {}
        for key in [] if withdrawn else positions:
            r = _share(w.ratio(key, DRAFTS))
            if r is not None:
                per_pos[int(key.removeprefix(_POS))] = r
        return WindowFigures(
            acceptance_ratio=_share(w.ratio(ACCEPTED, DRAFT_TOKENS)),
            mean_acceptance_length=None if drafts_ratio is None else 1.0 + drafts_ratio,
            decode_tokens_per_second=w.ratio(PREDICTED, PREDICTED_SECONDS),
            acceptance_by_position=per_pos,
            run=window_run(w),
            valid_until=valid_until,
        ), withdrawn
