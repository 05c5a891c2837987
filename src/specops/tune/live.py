"""The tune's cost model carried to the live service: what the tuned profile predicts on the traffic it serves now.

The tune keeps, for the speculative profile it chose, what its cost model (:mod:`specops.bench.costmodel`) needs: the
host's step costs (llama-bench: the target's, and the draft model's where the profile uses one), the server overheads
it fitted, and two figures for the same requests, the speedup it **measured** side by side with the unit's plain
decoding and the speedup the model gives for that arm's own speculation counters over that measurement (**modelled**).
The exporter applies the model to the live counters over its window (tokens generated, verification steps, drafted
and accepted tokens). What the model leaves unexplained of the measurement (measured against modelled) is put on the
round, as the overhead fit puts what it cannot separate (``round_correction_s``, either sign): on traffic that drafts
and accepts like the tune's requests the live figure reads the tune's measured one, where the live acceptance differs
it moves as the model says, and traffic that drafts nothing reads 1 (no round, nothing to correct). Without it the
model's own bias on this host (on a 2-core CPU it predicted n-gram types 14-21% high, issue 50) would read as
"traffic changed" the hour after the deploy.

A one-stream model: with several slots busy at once the live figure still prices each token as one stream would.

The live figure moves from window to window on the tune's own kinds of traffic too; what it is judged against is its
prediction band for a window of n requests (:mod:`specops.tune.band`), built from the same requests with
:meth:`LiveModel.predict_sums` (:mod:`specops.tune.windows`) and kept beside the model (``band``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specops.bench.costmodel import Overheads, Run, StepCosts, predicted_run_speedup, predicted_seconds

KEYS = ("target_step_s", "target_rel", "draft_step_s", "draft_rel", "overheads", "measured", "modelled",
        "round_correction_s")


@dataclass(frozen=True)
class LiveModel:
    costs: StepCosts
    over: Overheads  # as the tune fitted them
    measured: float  # the tune's measured speedup of the profile against the unit's plain decoding (token-weighted)
    modelled: float  # the model's speedup for that arm's own counters over the same measurement
    round_correction_s: float  # added to each round's time so that the model reads ``measured`` on that measurement

    def predict(self, run: Run) -> float | None:
        """The profile's speedup over plain decoding on ``run``'s counters (None: no token generated, or no figure)."""
        if run.n_tokens <= 0:
            return None
        o = self.over
        over = Overheads(o.per_token, o.per_round + self.round_correction_s, o.per_drafted, o.runs)
        out = predicted_run_speedup(self.costs, over, run)
        return out if math.isfinite(out) and out > 0 else None

    def predict_sums(self, sums: Any) -> Any:
        """:meth:`predict` on each row of summed (tokens, drafts, drafted, accepted) at once: the band's windows (numpy
        arrays, :mod:`specops.tune.windows`); nan where it gives none. The same arithmetic as
        :func:`specops.bench.costmodel.predicted_seconds` (tests/unit/test_tune_band.py holds them equal)."""
        import numpy as np

        n, d, t, a = np.asarray(sums, dtype=float).T
        c, o = self.costs, self.over
        per_token = c.target_step_s + o.per_token
        kbar = np.divide(t, d, out=np.zeros_like(t), where=d > 0)
        rounds = np.where(d > 0, -(a + d) * c.target_step_s + d * self._verify_many(kbar) + t * c.draft_step_s, 0.0)
        secs = n * per_token + rounds + d * (o.per_round + self.round_correction_s) + t * o.per_drafted
        with np.errstate(divide="ignore", invalid="ignore"):
            out = n * per_token / secs
        return np.where((n > 0) & np.isfinite(out) & (out > 0), out, np.nan)

    def _verify_many(self, kbar: Any) -> Any:
        """:meth:`StepCosts.verify_s` at each of ``kbar`` (>= 0): piecewise linear in k between the batch curves'
        measured sizes and past the last (:func:`specops.bench.ceiling.cost_at`), so priced at those and joined."""
        import numpy as np

        c = self.costs
        knots = sorted({0.0} | {k - 1.0 for k in (*c.target_rel, *(c.draft_rel or {})) if k >= 1})
        ys = [c.verify_s(k) for k in knots]
        top, slope = knots[-1], c.verify_s(knots[-1] + 1) - ys[-1]
        return np.where(kbar > top, ys[-1] + slope * (kbar - top), np.interp(kbar, knots, ys))

    def to_dict(self) -> dict[str, Any]:
        c, o = self.costs, self.over
        return {"target_step_s": c.target_step_s, "target_rel": {str(k): v for k, v in c.target_rel.items()},
                "draft_step_s": c.draft_step_s,
                "draft_rel": {str(k): v for k, v in c.draft_rel.items()} if c.draft_rel else None,
                "overheads": {"per_token_s": o.per_token, "per_round_s": o.per_round,
                              "per_drafted_s": o.per_drafted},
                "measured": self.measured, "modelled": self.modelled,
                "round_correction_s": self.round_correction_s}


def _shown(v: Any) -> str:
    return repr(v) if isinstance(v, (int, float)) else repr(str(v)[:40])


def _number(key: str, v: Any, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v <= 0):
        raise ValueError(f"live_model.{key} is {_shown(v)}, not a finite number {'> 0' if positive else '>= 0'}")
    return float(v)


def _curve(key: str, v: Any) -> dict[int, float]:
    if not isinstance(v, dict) or not v:
        raise ValueError(f"live_model.{key} is not a batch curve (an object of batch size: relative cost)")
    out: dict[int, float] = {}
    for k, x in v.items():
        if not str(k).isdigit() or int(k) < 1:
            raise ValueError(f"live_model.{key} has batch size {str(k)[:20]!r}, not a whole number >= 1")
        out[int(k)] = _number(f"{key}.{k}", x, positive=True)
    if 1 not in out:
        raise ValueError(f"live_model.{key} has no batch size 1")
    return out


def parse(value: Any) -> LiveModel:
    """A record's ``live_model`` (as :meth:`LiveModel.to_dict` writes it); ValueError (one line) when it is not one."""
    if not isinstance(value, dict):
        raise ValueError(f"live_model is a JSON {type(value).__name__}, not an object")
    missing = [k for k in KEYS if k not in value]
    if missing:
        raise ValueError(f"live_model lacks {', '.join(missing)}")
    over = value["overheads"]
    if not isinstance(over, dict):
        raise ValueError("live_model.overheads is not an object")
    draft_rel = None if value["draft_rel"] is None else _curve("draft_rel", value["draft_rel"])
    costs = StepCosts(_number("target_step_s", value["target_step_s"], positive=True),
                      _curve("target_rel", value["target_rel"]), _number("draft_step_s", value["draft_step_s"]),
                      draft_rel)
    o = Overheads(*(_number(f"overheads.{k}", over.get(k)) for k in ("per_token_s", "per_round_s", "per_drafted_s")))
    corr = value["round_correction_s"]
    if isinstance(corr, bool) or not isinstance(corr, (int, float)) or not math.isfinite(corr):
        raise ValueError(f"live_model.round_correction_s is {_shown(corr)}, not a finite number")
    return LiveModel(costs, o, _number("measured", value["measured"], positive=True),
                     _number("modelled", value["modelled"], positive=True), float(corr))


def decoded(res: Any) -> tuple[float, float] | None:
    """A request's (tokens, decode seconds) at the bench's decode rate (``decode_tps``: the client's view of the
    generation, the figure the tune's ratios use), or None where it has none."""
    if not isinstance(res, Mapping):
        return None
    n, tps = float(res.get("n_predicted") or 0), float(res.get("decode_tps") or 0)
    return (n, n / tps) if n > 0 and tps > 0 else None


def arm_run(records: Iterable[Mapping[str, Any]], arm: str, ref: str) -> tuple[Run, float | None]:
    """Over a measurement's blocks where ``arm`` and ``ref`` both ran: ``arm``'s tokens and speculation counters
    summed (the bench's per-request ``n_predicted`` and ``spec`` deltas; the seconds at the bench's decode rate), and
    its decode rate over ``ref``'s, token-weighted as the model's figure is (None: never paired)."""
    n = secs = drafts = drafted = accepted = ref_n = ref_s = 0.0
    for rec in records:
        results = rec.get("results") or {}
        mine, theirs = decoded(results.get(arm)), decoded(results.get(ref))
        if mine is None or theirs is None:
            continue
        spec = results[arm].get("spec") or {}
        n, secs = n + mine[0], secs + mine[1]
        ref_n, ref_s = ref_n + theirs[0], ref_s + theirs[1]
        drafts += float(spec.get("drafts") or 0)
        drafted += float(spec.get("draft_tokens") or 0)
        accepted += float(spec.get("accepted") or 0)
    ratio = (n / secs) / (ref_n / ref_s) if secs > 0 and ref_s > 0 else None
    return Run(n, secs, drafts, drafted, accepted), ratio


def build(costs: StepCosts, over: Overheads, records: Iterable[Mapping[str, Any]], arm: str,
          ref: str) -> tuple[LiveModel | None, str]:
    """The model for ``arm`` from a measurement's blocks against ``ref`` (the unit's plain decoding); None and why
    where the model cannot speak for it."""
    run, measured = arm_run(records, arm, ref)
    if measured is None:
        return None, "never measured in a block with plain decoding: no live prediction"
    if run.drafts <= 0:
        return None, "its measurement drafted nothing: no live prediction"
    modelled = predicted_run_speedup(costs, over, run)
    if not math.isfinite(modelled) or modelled <= 0:
        return None, "the cost model gives no figure for its measurement: no live prediction"
    plain = run.n_tokens * (costs.target_step_s + over.per_token)
    correction = (plain / measured - predicted_seconds(costs, over, run)) / run.drafts
    return LiveModel(costs, over, measured, modelled, correction), ""
