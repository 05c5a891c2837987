"""What a speculative llama-server costs per generated token, server overheads included.

``specops.bench.ceiling`` prices a round from llama-bench alone: the target's batch of k+1 tokens, the draft's
re-evaluation of it and its k single steps. That leaves out what the *server* spends around the model: sampling
and streaming every emitted token, per-round bookkeeping (draft context sync, verification of the batch, the
accept loop, host-device synchronisation) and per drafted token (sampling the draft, the draft's batch slots).
On a CPU step of 75 ms that is noise; on an H100 step of 2-7 ms it is a quarter of the time (the ceiling model's
prediction was 0.49-0.93 of what was measured there). So three overheads are measured on the host, not assumed:

* ``per_token`` - the plain server's time per token minus llama-bench's step (one short plain run);
* ``per_round`` and ``per_drafted`` - the rest of a speculative run's time after every modelled term, fitted by
  least squares over one or more short speculative runs (two draft lengths separate the two; with one, the
  rest is put on the round).

A run of N tokens in D rounds, T drafted and A accepted then takes

    N·(t1 + per_token) - (A + D)·t1                         the tokens decoded one step at a time, and emitting all
  + D·(t1·c(T/D + 1) + td·c_d(T/D + 1) + per_round)        each round: verify, re-evaluate on the draft
  + T·(td + per_drafted)                                    each drafted token

with t1 / td the target's / draft's one-token step and c / c_d their batch curves (llama-bench). A candidate draft
length k is predicted from the accepted-length distribution ``s_i`` (the share of rounds that accepted position i,
from the server's per-position counters): a round yields 1 + sum(s_i, i < k) tokens on average, so a probe at
the longest length gives every shorter one (a shorter greedy draft is a prefix of the longer one).

Checked on data it was not fitted on: the committed H100 runs (``reports/gpu-h100/``, three targets, four draft
lengths, three acceptance regimes) - tests/unit/test_costmodel.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specops.bench.ceiling import cost_at, draft_relative_for, relative_for


@dataclass(frozen=True)
class StepCosts:
    """The host's model costs from llama-bench: absolute one-token steps and relative batch curves."""

    target_step_s: float
    target_rel: Mapping[int, float]
    draft_step_s: float = 0.0  # 0: no draft model (n-gram, MTP counted in the target)
    draft_rel: Mapping[int, float] | None = None

    @classmethod
    def from_ceiling(cls, data: Mapping[str, Any], numerics: str, draft: str | None = None) -> StepCosts:
        """From :func:`specops.bench.ceiling.measure`'s output (as measured, or read back from its JSON): the
        target's one-token step and curve under ``numerics``, and the draft ``draft``'s (None: no draft model)."""
        target = data["target"][numerics]
        steps = {int(k): float(v) for k, v in target["batch_s"].items()}
        rel = relative_for(data, numerics)
        assert rel is not None
        if draft is None:
            return cls(steps[1], rel)
        return cls(steps[1], rel, float(data["draft_step_s"][draft]), draft_relative_for(data, draft))

    def verify_s(self, k: float) -> float:
        """One verification batch of k drafted tokens plus the last accepted one, and the draft's share."""
        out = self.target_step_s * cost_at(self.target_rel, k + 1)
        if self.draft_step_s and self.draft_rel:
            out += self.draft_step_s * cost_at(self.draft_rel, k + 1)
        return out


@dataclass(frozen=True)
class Overheads:
    """The server's own time around the model, in seconds."""

    per_token: float
    per_round: float = 0.0
    per_drafted: float = 0.0
    runs: int = 0  # speculative runs the round terms were fitted on

    def to_dict(self) -> dict[str, float | int]:
        return {"per_token_ms": self.per_token * 1e3, "per_round_ms": self.per_round * 1e3,
                "per_drafted_ms": self.per_drafted * 1e3, "runs": self.runs}


@dataclass(frozen=True)
class Run:
    """One measured run: tokens generated, speculation counters, decode seconds (0 drafts: plain)."""

    n_tokens: float
    seconds: float
    drafts: float = 0.0
    drafted: float = 0.0
    accepted: float = 0.0

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / self.n_tokens


def modelled_seconds(costs: StepCosts, per_token: float, run: Run) -> float:
    """The run's time from the step costs and the per-token overhead alone (no round terms)."""
    t1 = costs.target_step_s
    out = run.n_tokens * (t1 + per_token)
    if run.drafts > 0:
        kbar = run.drafted / run.drafts
        out += -(run.accepted + run.drafts) * t1 + run.drafts * costs.verify_s(kbar) + run.drafted * costs.draft_step_s
    return out


def predicted_seconds(costs: StepCosts, over: Overheads, run: Run) -> float:
    return (modelled_seconds(costs, over.per_token, run) + run.drafts * over.per_round
            + run.drafted * over.per_drafted)


def least_squares_2(rows: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(a, b) minimising sum (a·x + b·z - y)^2; None when x and z are (nearly) proportional across rows."""
    sxx = sum(x * x for x, _, _ in rows)
    szz = sum(z * z for _, z, _ in rows)
    sxz = sum(x * z for x, z, _ in rows)
    sxy = sum(x * y for x, _, y in rows)
    szy = sum(z * y for _, z, y in rows)
    det = sxx * szz - sxz * sxz
    if sxx <= 0 or szz <= 0 or det <= 1e-6 * sxx * szz:
        return None
    return (sxy * szz - szy * sxz) / det, (szy * sxx - sxy * sxz) / det


def _one_term(rows: Sequence[tuple[float, float, float]], col: int) -> float:
    """Least squares through the origin on one column (x or z), at least 0."""
    sxx = sum(r[col] * r[col] for r in rows)
    return max(0.0, sum(r[col] * r[2] for r in rows) / sxx) if sxx > 0 else 0.0


def fit_overheads(costs: StepCosts, plain: Run, spec_runs: Sequence[Run]) -> Overheads:
    """The server's overheads on this host: per token from a plain run, per round and per drafted token from
    speculative runs of the same server build (least squares on what the step costs leave unexplained; both
    terms at least 0). Runs that drafted nothing are ignored for the round terms."""
    if plain.n_tokens <= 0 or plain.seconds <= 0:
        raise ValueError("the plain run generated nothing: no per-token time to fit")
    per_token = max(0.0, plain.seconds_per_token - costs.target_step_s)
    rows = [(r.drafts, r.drafted, r.seconds - modelled_seconds(costs, per_token, r))
            for r in spec_runs if r.drafts > 0 and r.n_tokens > 0]
    if not rows:
        return Overheads(per_token)
    both = least_squares_2(rows)
    if both is not None and both[0] >= 0 and both[1] >= 0:
        return Overheads(per_token, both[0], both[1], len(rows))
    if both is not None and both[0] < 0:  # the drafted-token term explains it all
        return Overheads(per_token, 0.0, _one_term(rows, 1), len(rows))
    return Overheads(per_token, _one_term(rows, 0), 0.0, len(rows))


def survival(per_pos: Mapping[int | str, float], drafts: float) -> list[float]:
    """``s_i``: the share of rounds that accepted draft position i (0-based), from the server's per-position
    counters (``llamacpp:spec_decode_num_accepted_tokens_per_pos_total``) over the rounds of the same run.
    Made non-increasing (a round accepts position i only after every earlier one)."""
    if drafts <= 0:
        return []
    by_pos = {int(k): float(v) for k, v in per_pos.items()}
    out: list[float] = []
    last = 1.0
    for i in range(max(by_pos, default=-1) + 1):
        last = min(last, max(0.0, by_pos.get(i, 0.0) / drafts))
        out.append(last)
    return out


def expected_accepted(surv: Sequence[float], k: int) -> float:
    """Mean tokens accepted per round at draft length k, truncating the probe's longer drafts."""
    if k > len(surv):
        raise ValueError(f"the probe measured {len(surv)} positions; draft length {k} needs a longer probe")
    return float(sum(surv[:k]))


def predicted_speedup(costs: StepCosts, over: Overheads, k: int, accepted_per_round: float) -> float:
    """Speedup over plain decoding of a draft length k that accepts ``accepted_per_round`` tokens per round
    (every step a round: a draft model, or MTP, always drafts)."""
    plain = costs.target_step_s + over.per_token
    tokens = 1.0 + accepted_per_round
    round_s = (costs.verify_s(k) + k * (costs.draft_step_s + over.per_drafted) + over.per_round
               + tokens * over.per_token)
    return tokens * plain / round_s


def predicted_run_speedup(costs: StepCosts, over: Overheads, run: Run) -> float:
    """Speedup predicted for a measured run's own counters (plain time over the predicted time)."""
    plain = run.n_tokens * (costs.target_step_s + over.per_token)
    secs = predicted_seconds(costs, over, run)
    return plain / secs if secs > 0 else math.nan
