"""The traffic's mix: each workload's share of the requests, and the speedup of the whole mix **weighted by time**.

For a mix with request shares w_k (normalised: Σ w_k = 1) the mix's speedup over plain decoding is the ratio of the
service's decoding times, S = Σ_k w_k·E[T_plain,k] / Σ_k w_k·E[T_spec,k] = 1 / Σ_k (w_k / H_k), H_k the
**harmonic** mean of workload k's paired per-task ratios: a share-weighted harmonic mean, so a workload the
candidate slows down costs more time than an equal gain elsewhere saves (ratios 2.0 and 0.5 at half each: S = 0.8,
while their geometric mean reads 1.0 and their mean 1.25). The estimator and its derivation are
:mod:`specops.bench.weighted`.

The interval is a **confidence interval for the mix's mean speedup** (95% unless asked otherwise), not a prediction
for a new request: the delta method on log S, each workload's own variance where those carry 4 degrees of freedom
or more (Welch–Satterthwaite), and below that (issue 61 item 4: 2–3 tasks per workload) the within-workload spread
pooled over every task of the mix at n − K degrees of freedom (n tasks over K workloads with a share), never below
the workloads' own sum. A workload with one task counts; with n − K < 1 there is no interval. Workloads with no
share are left out. The coverage in simulation: ``scripts/sim-mix-coverage``, docs/measurements.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from specops.bench import weighted
from specops.bench.stats import Interval

# A mix that cannot be used (one line): the estimator's own error, so that ``except MixError`` catches what
# :func:`speedup` raises too.
MixError = weighted.WeightError


def parse(text: str | None, known: Sequence[str]) -> dict[str, float] | None:
    """``code=0.5,edit=0.3,prose=0.2,tool_calls=0`` → the shares normalised to sum 1, zero shares left out (None: no
    mix given, each measured task weighs the same). ``known``: the task set's workloads."""
    if text is None or not text.strip():
        return None
    shares: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, eq, value = part.partition("=")
        name = name.strip()
        try:
            share = float(value) if eq and name else math.nan
        except ValueError:
            share = math.nan
        if not math.isfinite(share):
            raise MixError(f"--mix: {part!r} is not workload=share (a number)")
        if share < 0:
            raise MixError(f"--mix: {name}'s share is negative ({share:g})")
        if name in shares:
            raise MixError(f"--mix: {name} is given twice")
        shares[name] = share
    unknown = [w for w in shares if w not in known]
    if unknown:
        raise MixError(f"--mix names workload(s) {', '.join(unknown)} not in the task set (it has: "
                       f"{', '.join(known) or 'none'})")
    total = sum(shares.values())
    if total <= 0:
        raise MixError("--mix: every share is zero")
    return {w: s / total for w, s in shares.items() if s > 0}


def normalised(shares: Mapping[str, float]) -> dict[str, float]:
    """The positive shares, summing to 1."""
    total = sum(s for s in shares.values() if s > 0)
    if total <= 0:
        raise MixError("the mix has no workload with a share above zero")
    return {w: s / total for w, s in shares.items() if s > 0}


def speedup(times: Mapping[str, Sequence[tuple[float, float]]], shares: Mapping[str, float],
            level: float = 0.95) -> Interval:
    """The mix's speedup of arm a over reference b with its ``level`` confidence interval for the mean speedup
    (:func:`specops.bench.weighted.speedup`). ``times``: per workload, per task (a_i, b_i), each side's decode time
    per request relative to plain decoding's (1 / ratio; 1 for plain decoding itself). Every workload with a share
    needs at least one task (MixError otherwise)."""
    return weighted.speedup(times, shares, level)


def arithmetic(means: Mapping[str, float], shares: Mapping[str, float]) -> str:
    """The figure's arithmetic for the record: ``1 / (0.70/1.20 edit + 0.30/0.95 prose) = 1.11×``, from each
    workload's harmonic mean of the per-task ratios (``means``)."""
    w = normalised(shares)
    terms = " + ".join(f"{w[k]:.2f}/{means[k]:.2f} {k}" for k in w)
    value = 1 / sum(w[k] / means[k] for k in w)
    return f"1 / ({terms}) = {value:.2f}×"


def label(shares: Mapping[str, float] | None) -> str:
    """The mix in a few words, for the exporter's info series and the morning report: ``edit 70%, prose 30%``, or
    ``no mix given`` without one (the record's ``mix_how`` says how the tune weighed the workloads then: the task
    set's shares, or each task the same where the measurement was cut short)."""
    if not shares:
        return "no mix given"
    return ", ".join(f"{k} {s:.0%}" for k, s in normalised(shares).items())


def describe(shares: Mapping[str, float] | None) -> str:
    """How the whole-mix figure was formed, for the record (without a mix: the pooled figure's words; the tune's
    default, the task set's shares, says its own, :func:`specops.tune.choose.shares`)."""
    if not shares:
        return ("no mix given: every measured task weighs the same (the geometric mean of the per-task ratios; equal "
                "shares per workload where each has as many tasks)")
    w = normalised(shares)
    return ("weighted by time for the mix " + ", ".join(f"{k} {s:.0%}" for k, s in w.items())
            + ": 1 / Σ share ÷ the workload's harmonic mean ratio (workloads with no share left out)")
