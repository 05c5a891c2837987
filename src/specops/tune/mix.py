"""The traffic's mix: each workload's share of the requests, and the speedup of the whole mix **weighted by time**.

For a mix with request shares w_k (normalised: Σ w_k = 1) the time the service spends decoding is Σ_k w_k·T_k, with
T_k a request's decode time in workload k, so the mix's speedup over plain decoding is

    S = Σ_k w_k·E[T_plain,k] / Σ_k w_k·E[T_spec,k]

Derivation from the paired per-task ratios r_i (the candidate's tok/s ÷ plain decoding's on task i, paired in the
same blocks). A request of L tokens takes T_plain,i = L / v_plain,i and T_spec,i = L / v_spec,i = T_plain,i / r_i.
With the same tokens per request and the same plain time per request T in every workload (the measurement sends
--max-tokens to every request, and plain decoding runs at one rate), E[T_spec,k] = T·mean_{i∈k}(1/r_i) = T / H_k,
H_k the **harmonic** mean of workload k's ratios, so

    S = Σ_k w_k·T / Σ_k (w_k·T / H_k) = 1 / Σ_k (w_k / H_k)

a share-weighted harmonic mean: a workload the candidate slows down costs more time than an equal gain elsewhere
saves (ratios 2.0 and 0.5 at half each: S = 0.8, while their geometric mean reads 1.0 and their mean 1.25).

The interval (95%, for a new request of each workload, as :mod:`specops.tune.evidence`): the delta method on
log S, workloads independent. For arm a against reference b, per task the relative times a_i, b_i (1/r_i, and 1 for
plain decoding itself), A = Σ w_k·mean_k(a), B = Σ w_k·mean_k(b), S = B / A, and
Var(log S) ≈ Σ_k (w_k² / n_k)·s²_k(b_i/B − a_i/A), with s²_k the sample variance over workload k's n_k tasks;
Student's t at the Welch–Satterthwaite degrees of freedom. A workload in the mix with fewer than two tasks: no
interval. Workloads with no share are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from specops.bench.stats import Interval, mean, t975


class MixError(ValueError):
    """A mix that cannot be used (one line)."""


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


def speedup(times: Mapping[str, Sequence[tuple[float, float]]], shares: Mapping[str, float]) -> Interval:
    """The mix's speedup of arm a over reference b with its interval. ``times``: per workload, per task (a_i, b_i),
    each side's decode time per request relative to plain decoding's (1 / ratio; 1 for plain decoding itself). Every
    workload with a share needs at least one task."""
    w = normalised(shares)
    missing = [k for k in w if not times.get(k)]
    if missing:
        raise MixError(f"no measured task of workload(s) {', '.join(missing)} in the mix")
    a_tot = sum(w[k] * mean([a for a, _ in times[k]]) for k in w)
    b_tot = sum(w[k] * mean([b for _, b in times[k]]) for k in w)
    est = b_tot / a_tot
    n = sum(len(times[k]) for k in w)
    if any(len(times[k]) < 2 for k in w):
        return Interval(est, None, None, n)
    parts = []
    for k in w:
        d = [b / b_tot - a / a_tot for a, b in times[k]]
        m = mean(d)
        var = sum((x - m) ** 2 for x in d) / (len(d) - 1)
        parts.append((w[k] ** 2 * var / len(d), len(d) - 1))
    total = sum(c for c, _ in parts)
    if total <= 0:
        return Interval(est, est, est, n)
    df = total ** 2 / sum(c ** 2 / dof for c, dof in parts)  # Welch–Satterthwaite
    half = t975(max(1, math.floor(df))) * math.sqrt(total)
    return Interval(est, est * math.exp(-half), est * math.exp(half), n)


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
