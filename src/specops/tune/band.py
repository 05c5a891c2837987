"""The live check's **prediction band for a window of n requests** (issue 62 item 7, issue 79 item 4), as the record
keeps it and the exporter reads it (no numpy here: the exporter's hosts have none; the tune builds it,
:mod:`specops.tune.windows`).

The live figure (:mod:`specops.tune.live`) is the tune's cost model on the speculation counters summed over the
exporter's window. On traffic of the tune's own kinds it still moves from window to window: a window holds a few
requests, and an edit drafts where prose does not. The band is that spread: the figure over windows of n new requests
of the tune's kinds **drawn at the tune's shares**, from its low to its high quantile at :data:`TRAFFIC` (two-sided),
by resampling the tune's measured requests (each request's workload drawn by its share, so a window's own mix varies
as the traffic's does and a small window often holds a run of one workload; each window from its own reweighing of the
tune's tasks: the tune's dozen tasks a workload only estimate their kind). It is wide for small windows and narrows as
n grows toward the mix's own figure, to about the uncertainty of the tune's own figure, which more requests a window do
not shrink: past the table's largest n the band keeps that n's edges. It is not a confidence interval for the mean
(``speedup.low``/``high`` are): on the standard set's CPU tune a window of 10 of the tune's own requests falls outside
that one 32% of the time (docs/measurements.md, 2026-12-02).

The window's mix is not known live (llama-server's counters carry no workload label). Ordinary traffic's window is a
draw of the mix, and the band holds it; a lasting move to one workload moves every window toward that workload's own
figure and, once n is large enough that the mix's band no longer reaches it, out of the band; the traffic alert holds
an hour, so a run of one workload shorter than that does not fire. (Before issue 79 item 4 the band was the envelope of
the spread at the shares and of each workload's alone: any traffic between the workloads' figures read inside, and a
host tuned on 70/30 edits and prose never fired on prose alone.) scripts/sim-live-shift measures both
(docs/measurements.md, 2026-12-07).

The exporter knows the window's generated tokens, not its requests: n is the window's tokens ÷ a tune request's mean
tokens, so a long live request counts as several tune requests. Below n = 1 the band is n = 1's.

The loss check needs the live figure **confidently** below 1: the live figure over n requests ÷ the lowest a window of
n of the tune's own requests reads against their whole figure (``windows``: the windows' own spread, at the shares, at
:data:`LEVEL`; past the table it closes in on the centre as 1/√n, :meth:`Spread.at`) is the most the traffic's own
figure can be (:meth:`Band.upper`). Traffic that drafts nothing reads 1, and 1 ÷ (a number at most 1) is at least 1:
it never reads as a loss.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Two-sided. The loss check's (the windows' own spread, :meth:`Band.upper`): 99%; scripts/sim-live-alarms
# (docs/measurements.md, 2026-12-02) found no false alarm in host-months of the tune's own traffic at 95%, 99% or 99.9%,
# and 99% still sees a 10% loss at 100 requests a window on the 70/30 host where 99.9% does not.
LEVEL = 0.99
# The traffic band's (the spread at the tune's shares, :meth:`Band.edges`): 95%. The traffic alert holds an hour of
# windows all outside (a dozen windows of the exporter's 5 minutes), so a window's own noise past an edge makes no
# alarm; what the level sets is how far the tune's own figure may be off its kinds' before a host reads outside for
# good. scripts/sim-live-shift (docs/measurements.md, 2026-12-07): on the 70/30 host with edits spread 0.24, prose alone
# at 20 requests a minute fires within 2 hours on 92.5% of hosts at 95% and 73.5% at 99%.
TRAFFIC = 0.95
GRID = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # window sizes tabulated (requests)
SHARES = "the tune's shares"  # the spread drawn at the tune's shares (before issue 79 item 4: also each workload alone)
WHAT = ("a prediction band for a window of n requests: the spread of the live figure over windows of n new requests of "
        "the tune's kinds drawn at its shares (its measured requests resampled, its tasks reweighed each window, the "
        "edges widened on the log scale for the kinds' tasks it did not measure), narrowing with n to the tune's own "
        "uncertainty of its figure; windows: the same windows about the tune's own figure, for the loss check")


@dataclass(frozen=True)
class Spread:
    """How windows of one kind read: drawn at ``mix`` (:data:`SHARES`; a record from before issue 79 item 4 also kept
    one workload's name alone). ``centre``: the figure of a window without end; ``rows``: (n, low, high) at ``level``,
    n ascending; ``tasks``: the fewest tasks a drawn workload measured, and ``widened``: how much wider than the
    resampled windows' the edges lie on the log scale for the kind's tasks not measured (1: the tune's own requests
    alone; :mod:`specops.tune.windows`)."""

    mix: str
    tokens_per_request: float
    centre: float
    rows: tuple[tuple[float, float, float], ...]
    tasks: int = 0
    widened: float = 1.0
    level: float = LEVEL

    def requests(self, tokens: float) -> float:
        """A window of ``tokens`` generated tokens, in this spread's requests."""
        return tokens / self.tokens_per_request

    def at(self, n: float) -> tuple[float, float]:
        """(low, high) for a window of n requests: linear in log n between the rows, n = 1's below it, closing in on
        the centre as 1/√n past the last."""
        ns = [r[0] for r in self.rows]
        if n <= ns[0]:
            return self.rows[0][1], self.rows[0][2]
        if n >= ns[-1]:
            top, low, high = self.rows[-1]
            shrink = math.sqrt(top / n)
            return self.centre - (self.centre - low) * shrink, self.centre + (high - self.centre) * shrink
        i = bisect.bisect_right(ns, n)
        (n0, lo0, hi0), (n1, lo1, hi1) = self.rows[i - 1], self.rows[i]
        f = (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
        return lo0 + (lo1 - lo0) * f, hi0 + (hi1 - hi0) * f

    def to_dict(self) -> dict[str, Any]:
        return {"mix": self.mix, "level": self.level, "tokens_per_request": round(self.tokens_per_request, 2),
                "centre": round(self.centre, 5), "tasks": self.tasks, "widened": round(self.widened, 4),
                "windows": [{"n": n, "low": round(lo, 5), "high": round(hi, 5)} for n, lo, hi in self.rows]}


@dataclass(frozen=True)
class Band:
    """The band the record keeps: the spread at the tune's shares (new requests of the tune's kinds at
    :data:`TRAFFIC`: the traffic check) and the windows' own spread at the shares (at :data:`LEVEL`: the loss
    check)."""

    shares: Spread
    windows: Spread

    @property
    def level(self) -> float:
        """The traffic band's level."""
        return self.shares.level

    def window_requests(self, tokens: float) -> float:
        """The window's requests as the tune's requests at its shares (its tokens ÷ their mean tokens)."""
        return self.shares.requests(tokens)

    def edges(self, tokens: float) -> tuple[float, float]:
        """The band for a window of ``tokens`` generated tokens: the spread at the tune's shares at its n, held at the
        table's largest n past it (there its width is the tune's own uncertainty, which a longer window keeps)."""
        s = self.shares
        return s.at(min(s.requests(tokens), s.rows[-1][0]))

    def upper(self, live: float, tokens: float) -> float:
        """The most the live traffic's own figure can be, given ``live`` over a window of ``tokens``: ``live`` ÷ the
        lowest such a window of the tune's requests reads against their whole figure (never below ``live``)."""
        w = self.windows
        low, _ = w.at(w.requests(tokens))
        return live * max(1.0, w.centre / low)

    def to_dict(self) -> dict[str, Any]:
        return {"what": WHAT, "level": self.level, "spreads": [self.shares.to_dict()],
                "windows": self.windows.to_dict()}


def _positive(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        shown = repr(v) if isinstance(v, (int, float)) else repr(str(v)[:40])
        raise ValueError(f"{where} is {shown}, not a finite number > 0")
    return float(v)


def _level(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
        raise ValueError(f"{where} is {str(v)[:40]!r}, not a level between 0 and 1")
    return float(v)


def _spread(where: str, value: Any, level: float) -> Spread:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is not an object")
    mix = value.get("mix")
    if not isinstance(mix, str) or not mix:
        raise ValueError(f"{where}.mix is not a name")
    rows = value.get("windows")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{where}.windows is not a list of windows")
    out: list[tuple[float, float, float]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}.windows[{i}] is not an object")
        n, lo, hi = (_positive(f"{where}.windows[{i}].{k}", row.get(k)) for k in ("n", "low", "high"))
        if lo > hi or (out and n <= out[-1][0]):
            raise ValueError(f"{where}.windows[{i}] has low above high, or n not ascending")
        out.append((n, lo, hi))
    tasks = value.get("tasks", 0)
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 0:
        raise ValueError(f"{where}.tasks is {str(tasks)[:40]!r}, not a count of tasks")
    return Spread(mix, _positive(f"{where}.tokens_per_request", value.get("tokens_per_request")),
                  _positive(f"{where}.centre", value.get("centre")), tuple(out), tasks,
                  _positive(f"{where}.widened", value.get("widened", 1.0)),
                  _level(f"{where}.level", value.get("level", level)))


def parse(value: Any) -> Band:
    """A record's ``live_model.band`` (as :meth:`Band.to_dict` writes it); ValueError (one line) when it is not one.
    A spread without a level of its own is at the band's ``level``. A record from before issue 79 item 4 (no spread's
    own level, all at 99%) keeps each workload's spread alone after the one at the shares: those are checked as
    before and set aside, so its traffic band is its spread at the shares alone, at 99%."""
    if not isinstance(value, Mapping):
        raise ValueError(f"band is a JSON {type(value).__name__}, not an object")
    level = _level("band.level", value.get("level"))
    spreads = value.get("spreads")
    if not isinstance(spreads, Sequence) or isinstance(spreads, str) or not spreads:
        raise ValueError("band.spreads is not a list of spreads")
    parsed = [_spread(f"band.spreads[{i}]", s, level) for i, s in enumerate(spreads)]
    own = _spread("band.windows", value.get("windows"), level)
    for where, s in (("band.spreads[0]", parsed[0]), ("band.windows", own)):
        if s.mix != SHARES:
            raise ValueError(f"{where} is drawn at {s.mix!r}, not at {SHARES!r}")
    return Band(parsed[0], own)
