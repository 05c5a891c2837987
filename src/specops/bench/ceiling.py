"""The hardware ceiling: what speculation can gain on this host at all, whatever the draft.

Speculation replaces k+1 target decode steps by one verification of a batch of k+1 tokens (k
drafted + the last accepted one) plus the draft's own work. On a GPU a batch of 8 costs about one
step; on a memory-bound 2-core CPU it does not. We measure it directly with llama.cpp's
``llama-bench``: ``-p k -n 0 -d D`` times one batch of k tokens on a context already holding D
tokens, exactly the shape of a verification, for k = 1…17 (``-p 1`` is one ordinary decode step).
``c(k) = t(k) / t(1)`` is the cost of verifying k tokens in decode steps.

(The alternative, ``llama-server --spec-synth-len``, fakes acceptance but still runs the draft
model, so it mixes draft cost into the curve; llama-bench isolates the target's batch cost.)

From c(k) and the draft's cost r (one draft step / one target step, also from ``llama-bench -p 1``):

* perfect-acceptance ceiling for draft length k, free draft: (k+1) / c(k+1)
* … with the draft's cost:                                  (k+1) / (c(k+1) + k·r)
* predicted speedup of an arm from its measured counters: generated tokens N, drafts D, drafted
  tokens T, accepted A. D verification steps yield A + D tokens; the other N - A - D tokens take
  one plain step each; drafting costs T·r. Speedup = N / ((N - A - D) + D·c(T/D + 1) + T·r), and the
  arm's own ceiling (free draft) drops the T·r term.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KS = tuple(range(1, 18))


class CeilingError(RuntimeError):
    pass


@dataclass(frozen=True)
class Numerics:
    """The settings that change the target's kernels (and so the batch cost)."""

    name: str
    flash_attn: str | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    repack: bool | None = None
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of_profile(cls, profile: Mapping[str, Any], env: Mapping[str, str]) -> Numerics:
        fa, ctk, ctv = profile.get("flash_attn"), profile.get("cache_type_k"), profile.get("cache_type_v")
        repack = profile.get("repack")
        parts = [
            f"fa={fa}" if fa else "",
            f"ctk={ctk}" if ctk else "",
            f"ctv={ctv}" if ctv else "",
            "no-repack" if repack is False else "",
            *(f"{k}={v}" for k, v in sorted(env.items())),
        ]
        name = ",".join(p for p in parts if p) or "default"
        return cls(name, fa, ctk, ctv, repack, tuple(sorted(env.items())))


def llama_bench_argv(
    binary: str | Path,
    model: str | Path,
    ks: Sequence[int],
    depth: int,
    reps: int,
    threads: int | None,
    numerics: Numerics,
) -> list[str]:
    """argv of llama-bench for batch costs (llama-bench's own flags, not llama-server's)."""
    argv = [
        str(binary),
        "-m",
        str(model),
        "-p",
        ",".join(str(k) for k in ks),
        "-n",
        "0",
        "-d",
        str(depth),
        "-r",
        str(reps),
        "-o",
        "json",
    ]
    if threads:
        argv += ["-t", str(threads)]
    if numerics.flash_attn:
        argv += ["-fa", numerics.flash_attn]
    if numerics.cache_type_k:
        argv += ["-ctk", numerics.cache_type_k]
    if numerics.cache_type_v:
        argv += ["-ctv", numerics.cache_type_v]
    if numerics.repack is False:
        argv += ["--repack", "0"]
    return argv


def run_llama_bench(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 1800) -> list[dict]:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})}
    )
    if proc.returncode != 0:
        raise CeilingError(f"llama-bench failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-2000:]}")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise CeilingError(f"llama-bench printed no JSON: {proc.stdout[:300]!r}") from exc
    if not isinstance(data, list):
        raise CeilingError("llama-bench JSON is not a list")
    return data


def batch_times(records: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """``{k: seconds for one batch of k tokens}`` from llama-bench JSON records."""
    out: dict[int, float] = {}
    for r in records:
        if int(r.get("n_gen", 0)) == 0 and int(r.get("n_prompt", 0)) > 0:
            out[int(r["n_prompt"])] = float(r["avg_ns"]) / 1e9
    if 1 not in out:
        raise CeilingError("no single-token (k=1) measurement in llama-bench output")
    return dict(sorted(out.items()))


def relative_cost(times: Mapping[int, float]) -> dict[int, float]:
    base = times[1]
    return {k: t / base for k, t in sorted(times.items())}


def cost_at(rel: Mapping[int, float], k: float) -> float:
    """c(k) with linear interpolation between measured k (and extrapolation past the last one)."""
    ks = sorted(rel)
    if k <= ks[0]:
        return rel[ks[0]] * k / ks[0]
    for lo, hi in itertools.pairwise(ks):
        if lo <= k <= hi:
            return rel[lo] + (rel[hi] - rel[lo]) * (k - lo) / (hi - lo)
    last, prev = ks[-1], ks[-2] if len(ks) > 1 else ks[-1]
    slope = (rel[last] - rel[prev]) / (last - prev) if last != prev else rel[last] / last
    return rel[last] + slope * (k - last)


def perfect_ceiling(rel: Mapping[int, float], k: int, draft_cost: float = 0.0) -> float:
    """Speedup with every one of k drafted tokens accepted."""
    return (k + 1) / (cost_at(rel, k + 1) + k * draft_cost)


@dataclass(frozen=True)
class Prediction:
    predicted: float
    ceiling: float
    mean_draft_len: float

    def to_dict(self) -> dict[str, float]:
        return {"predicted": self.predicted, "ceiling": self.ceiling, "mean_draft_len": self.mean_draft_len}


def predict(
    n_tokens: float,
    drafts: float,
    drafted: float,
    accepted: float,
    rel: Mapping[int, float],
    draft_cost: float,
) -> Prediction | None:
    """Predicted speedup (and the draft-free ceiling) from an arm's counters; None without data."""
    if n_tokens <= 0:
        return None
    if drafts <= 0:
        return Prediction(1.0, 1.0, 0.0)
    kbar = drafted / drafts
    plain = max(0.0, n_tokens - accepted - drafts)
    verify = drafts * cost_at(rel, kbar + 1)
    return Prediction(n_tokens / (plain + verify + drafted * draft_cost), n_tokens / (plain + verify), kbar)


def measure(
    bench_bin: Path,
    target: Path,
    numerics: list[Numerics],
    drafts: Mapping[str, Path],
    depth: int = 256,
    reps: int = 5,
    threads: int | None = None,
    progress: Callable[[str], None] = print,
    ks: Sequence[int] = KS,
) -> dict[str, Any]:
    """Run llama-bench for the target under each numerics setting and for each draft model (k=1)."""
    ks = tuple(ks)
    out: dict[str, Any] = {
        "depth": depth,
        "reps": reps,
        "threads": threads,
        "ks": list(ks),
        "target": {},
        "draft_step_s": {},
        "argv": {},
    }
    for num in numerics:
        argv = llama_bench_argv(bench_bin, target, ks, depth, reps, threads, num)
        progress(f"ceiling: llama-bench target, numerics {num.name} (k=1..{ks[-1]}, depth {depth})")
        times = batch_times(run_llama_bench(argv, dict(num.env)))
        out["target"][num.name] = {"batch_s": times, "relative": relative_cost(times)}
        out["argv"][f"target:{num.name}"] = argv
    default = Numerics("default")
    for name, path in drafts.items():
        argv = llama_bench_argv(bench_bin, path, (1,), depth, reps, threads, default)
        progress(f"ceiling: llama-bench draft {name} (one step, depth {depth})")
        times = batch_times(run_llama_bench(argv))
        out["draft_step_s"][name] = times[1]
        out["argv"][f"draft:{name}"] = argv
    return out


def draft_cost_ratio(ceiling: Mapping[str, Any], draft: str | None, numerics: str = "default") -> float:
    """Draft step / target step (0 for n-gram arms, which have no draft model)."""
    if draft is None:
        return 0.0
    step = ceiling.get("draft_step_s", {}).get(draft)
    tgt = ceiling.get("target", {}).get(numerics) or ceiling.get("target", {}).get("default")
    if step is None or not tgt:
        return float("nan")
    return float(step) / float(_as_int_keys(tgt["batch_s"])[1])


def _as_int_keys(d: Mapping[Any, float]) -> dict[int, float]:
    return {int(k): float(v) for k, v in d.items()}


def relative_for(ceiling: Mapping[str, Any], numerics: str) -> dict[int, float] | None:
    tgt = ceiling.get("target", {}).get(numerics) or ceiling.get("target", {}).get("default")
    return _as_int_keys(tgt["relative"]) if tgt else None
