"""The hardware ceiling: what speculation can gain on this host at all, whatever the acceptance.

Speculation replaces k+1 target decode steps by one verification of a batch of k+1 tokens (k drafted +
the last accepted one) plus the draft's own work. On a GPU a batch of 8 costs about one step; on a
memory-bound 2-core CPU it does not. llama.cpp's ``llama-bench -p k -n 0 -d D`` times one batch of k
tokens on a context already holding D tokens, the shape of a verification (``-p 1`` is one ordinary
decode step): ``c(k) = t(k) / t(1)`` is the cost of verifying k tokens in decode steps. The same run on
the draft model gives its step cost ``r`` (draft step ÷ target step) and its own batch curve ``c_d(k)``.

What a draft-model round costs at the pinned llama.cpp (``tools/server/server-context.cpp``, marked
``TAG_SPEC_AVOID_DRAFT_REEVAL``): the server re-evaluates every verified batch on the draft model as well,
to keep the draft's cache in step, and then drafts k tokens one step at a time. So one round costs

    c(k+1) + r·(c_d(k+1) + k)           target steps, for 1 + accepted tokens.

N-gram drafts cost nothing to make (a table lookup): c(k+1).

* perfect-acceptance ceiling for draft length k: (k+1) / that cost.
* predicted speedup of an arm from its measured counters: generated tokens N, drafts D, drafted tokens T,
  accepted A. D rounds yield A + D tokens; the other N - A - D tokens take one plain step each. Speedup =
  N / ((N - A - D) + D·(c(T/D + 1) + r·c_d(T/D + 1)) + T·r); the arm's own ceiling (free draft) drops the
  draft terms.

The model still leaves out the server's per-position work (the target outputs logits for all k+1
positions, llama-bench's batch for one; sampling; streaming), so it is optimistic: fine for pruning
(an arm it says cannot pay cannot), and the report shows how far the measured speed falls below it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.knobs import NGRAM_TYPES, Knob, knob

KS = (1, 2, 3, 4, 5, 6, 8, 9, 12, 17, 25, 33, 49, 65)
DRAFT_KS = (1, 2, 3, 4, 5, 6, 8, 9, 12, 17)


def ngram_length_knob(spec_type: str) -> Knob:
    """The setting that bounds an n-gram type's draft: ngram-mod and ngram-cache take the draft length (the knob's
    spelling under them), the others draft an m-gram (its size M)."""
    n_max = knob("draft_n_max")
    return n_max if n_max.for_spec_type(spec_type) else knob("ngram_size_m")


# llama.cpp's own draft lengths at the pinned commit (llama-server --help, the knob table), for arms that leave them
# unset: the draft models' and each n-gram type's (ngram-mod 64, the m-gram types 48, ngram-cache 3)
DEFAULT_DRAFT_N_MAX = int(knob("draft_n_max").llama_default)  # type: ignore[call-overload]
NGRAM_DRAFT_N_MAX = {t: int(ngram_length_knob(t).llama_default_for(t))  # type: ignore[call-overload]
                     for t in NGRAM_TYPES}


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



def _bench_flag(name: str) -> str:
    """llama-bench's spelling of a knob (from the knob table)."""
    flag = knob(name).llama_bench
    assert flag is not None, name
    return flag

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
        argv += [_bench_flag("threads"), str(threads)]
    if numerics.flash_attn:
        argv += [_bench_flag("flash_attn"), numerics.flash_attn]
    if numerics.cache_type_k:
        argv += [_bench_flag("cache_type_k"), numerics.cache_type_k]
    if numerics.cache_type_v:
        argv += [_bench_flag("cache_type_v"), numerics.cache_type_v]
    if numerics.repack is False:
        argv += [_bench_flag("repack"), "0"]
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
    """``{k: seconds for one batch of k tokens}`` from llama-bench JSON records: the median of the
    repetitions (``samples_ns``), so one stalled repetition on a shared machine does not move it; the
    average where a build reports no samples."""
    out: dict[int, float] = {}
    for r in records:
        if int(r.get("n_gen", 0)) == 0 and int(r.get("n_prompt", 0)) > 0:
            samples = sorted(float(x) for x in r.get("samples_ns") or [])
            if samples:
                mid = len(samples) // 2
                ns = samples[mid] if len(samples) % 2 else (samples[mid - 1] + samples[mid]) / 2
            else:
                ns = float(r["avg_ns"])
            out[int(r["n_prompt"])] = ns / 1e9
    if 1 not in out:
        raise CeilingError("no single-token (k=1) measurement in llama-bench output")
    return dict(sorted(out.items()))


def relative_cost(times: Mapping[int, float]) -> dict[int, float]:
    """c(k): one batch of k tokens in single-token steps. A batch of more tokens never costs less than one of
    fewer (the same weights are read, more is computed) nor less than one token, and a busy machine only ever
    makes a timing longer. So a curve that breaks the order was stalled somewhere, and each c(k) is taken as the
    lowest value every later batch allows (the least over j >= k), at least c(1) = 1: non-decreasing and as low as
    the measurements permit. That keeps the ceiling an upper bound a neighbour's load can neither inflate (a
    stalled k=1 timing: c(2) = 0.45 would let a draft as costly as the target "pay") nor deflate into pruning an
    arm that could pay (a stalled k=2 timing carried up to every larger k)."""
    base = times[1]
    out: dict[int, float] = {}
    low = math.inf
    for k in sorted(times, reverse=True):
        low = min(low, times[k] / base)
        out[k] = 1.0 if k == 1 else max(1.0, low)
    return dict(sorted(out.items()))


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


def round_cost(rel: Mapping[int, float], k: float, draft_cost: float = 0.0,
               draft_rel: Mapping[int, float] | None = None) -> float:
    """Target steps for one round drafting k tokens: verify k+1, and with a draft model re-evaluate the
    verified batch on it (when its curve ``draft_rel`` is known) and draft k tokens."""
    cost = cost_at(rel, k + 1) + k * draft_cost
    if draft_cost and draft_rel:
        cost += draft_cost * cost_at(draft_rel, k + 1)
    return cost


def perfect_ceiling(rel: Mapping[int, float], k: int, draft_cost: float = 0.0,
                    draft_rel: Mapping[int, float] | None = None) -> float:
    """Speedup with every one of k drafted tokens accepted."""
    return (k + 1) / round_cost(rel, k, draft_cost, draft_rel)


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
    draft_rel: Mapping[int, float] | None = None,
) -> Prediction | None:
    """Predicted speedup (and the draft-free ceiling) from an arm's counters; None without data."""
    if n_tokens <= 0:
        return None
    if drafts <= 0:
        return Prediction(1.0, 1.0, 0.0)
    kbar = drafted / drafts
    plain = max(0.0, n_tokens - accepted - drafts)
    verify = drafts * cost_at(rel, kbar + 1)
    reeval = drafts * draft_cost * cost_at(draft_rel, kbar + 1) if draft_cost and draft_rel else 0.0
    return Prediction(n_tokens / (plain + verify + reeval + drafted * draft_cost), n_tokens / (plain + verify),
                      kbar)


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
    ks_for: Mapping[str, int] | None = None,
    draft_k_max: int = max(DRAFT_KS),
) -> dict[str, Any]:
    """Run llama-bench for the target under each numerics setting and for each draft model.

    ``ks_for``: the largest batch each numerics setting needs (its arms' longest draft + 1); larger k are
    skipped there (every k costs a refill of the context to ``depth``). The draft's step cost is bracketed:
    the target's single step is timed again right after the drafts, and r uses the mean of both, so a machine
    drifting between the runs does not skew it."""
    ks = tuple(sorted(set(ks)))
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
        limit = (ks_for or {}).get(num.name, ks[-1])
        nks = tuple(k for k in ks if k <= limit) or (1, 2)
        argv = llama_bench_argv(bench_bin, target, nks, depth, reps, threads, num)
        progress(f"ceiling: llama-bench target, numerics {num.name} (k={','.join(map(str, nks))}, depth {depth})")
        times = batch_times(run_llama_bench(argv, dict(num.env)))
        out["target"][num.name] = {"batch_s": times, "relative": relative_cost(times)}
        out["argv"][f"target:{num.name}"] = argv
    default = Numerics("default")
    dks = tuple(k for k in ks if k <= draft_k_max) or (1,)
    out["draft"] = {}
    for name, path in drafts.items():
        if Path(path).resolve() == Path(target).resolve() and out["target"]:
            # self-speculation: the draft *is* the target, its step costs one target step by identity; timing it
            # again one run later would only measure the machine's drift (a neighbour's load halved it once, and
            # under the unit's numerics, fa=on,ctv=q8_0, a target timed at 3.5 times the draft's step let the arm
            # escape pruning). Its curve is the target's: the default numerics' where measured, else the first.
            same = out["target"].get("default") or next(iter(out["target"].values()))
            out["draft_step_s"][name] = same["batch_s"][1]
            out["draft"][name] = {"batch_s": same["batch_s"], "relative": same["relative"], "same_as_target": True}
            progress(f"ceiling: draft {name} is the target file itself: r = 1 by identity")
            continue
        argv = llama_bench_argv(bench_bin, path, dks, depth, reps, threads, default)
        progress(f"ceiling: llama-bench draft {name} (k={','.join(map(str, dks))}, depth {depth})")
        times = batch_times(run_llama_bench(argv))
        out["draft_step_s"][name] = times[1]
        out["draft"][name] = {"batch_s": times, "relative": relative_cost(times)}
        out["argv"][f"draft:{name}"] = argv
    if any(not d.get("same_as_target") for d in out["draft"].values()) and "default" in out["target"]:
        argv = llama_bench_argv(bench_bin, target, (1,), depth, reps, threads, default)
        progress("ceiling: llama-bench target again (one step, brackets the draft's)")
        again = batch_times(run_llama_bench(argv))[1]
        out["target_step_after_drafts_s"] = again
    return out


def draft_cost_ratio(ceiling: Mapping[str, Any], draft: str | None, numerics: str = "default") -> float:
    """Draft step / target step (0 for n-gram arms, which have no draft model)."""
    if draft is None:
        return 0.0
    if ((ceiling.get("draft") or {}).get(draft) or {}).get("same_as_target"):
        return 1.0  # the draft is the target file: one target step by identity
    step = ceiling.get("draft_step_s", {}).get(draft)
    tgt = ceiling.get("target", {}).get(numerics) or ceiling.get("target", {}).get("default")
    if step is None or not tgt:
        return float("nan")
    t1 = float(_as_int_keys(tgt["batch_s"])[1])
    again = ceiling.get("target_step_after_drafts_s")  # timed with the default numerics, right after the drafts
    if again and tgt is ceiling.get("target", {}).get("default"):
        t1 = (t1 + float(again)) / 2
    return float(step) / t1


def _as_int_keys(d: Mapping[Any, float]) -> dict[int, float]:
    return {int(k): float(v) for k, v in d.items()}


def draft_relative_for(ceiling: Mapping[str, Any], draft: str | None) -> dict[int, float] | None:
    """The draft model's own batch curve c_d(k) (None for n-gram arms, or a ceiling measured without it)."""
    if draft is None:
        return None
    d = (ceiling.get("draft") or {}).get(draft)
    return _as_int_keys(d["relative"]) if d else None


def relative_for(ceiling: Mapping[str, Any], numerics: str) -> dict[int, float] | None:
    tgt = ceiling.get("target", {}).get(numerics) or ceiling.get("target", {}).get("default")
    return _as_int_keys(tgt["relative"]) if tgt else None


def pays(best: float, margin: float) -> bool:
    """**The one prune by the ceiling**: a profile whose speedup at perfect acceptance (:func:`perfect_ceiling`, at
    the best draft length it may use) stays below 1 + ``margin`` cannot pay on this host whatever its acceptance.
    The bench's arms (:func:`prune`) and the tune's draft lengths (:func:`specops.tune.price.pruned`) are pruned by
    it."""
    return best >= 1.0 + margin


@dataclass(frozen=True)
class ArmCeiling:
    """The best an arm can do on this host: every drafted token accepted, at the best draft length it may use.

    ``best`` is optimistic on purpose (llama-bench's batch and draft costs, no server overhead), so an arm
    whose ``best`` is below 1 + margin cannot pay here whatever its acceptance."""

    arm: str
    best: float
    at_k: int
    n_max: int
    draft_cost: float
    numerics: str

    def pays(self, margin: float) -> bool:
        return pays(self.best, margin)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def arm_n_max(profile: Mapping[str, Any]) -> int:
    """The longest draft an arm may verify, from its profile or llama.cpp's defaults for its type."""
    spec = profile.get("spec_type", "auto")
    if spec in NGRAM_DRAFT_N_MAX:
        return int(profile.get(ngram_length_knob(spec).name) or NGRAM_DRAFT_N_MAX[spec])
    return int(profile.get("draft_n_max") or DEFAULT_DRAFT_N_MAX)


def arm_ceiling(name: str, arm_def: Mapping[str, Any], ceiling: Mapping[str, Any]) -> ArmCeiling | None:
    """Perfect-acceptance ceiling of a speculative arm from the measured c(k) and draft cost; None when the
    measurement does not cover the arm (its numerics or its draft were not measured)."""
    profile = arm_def.get("profile", {})
    numerics = Numerics.of_profile(profile, arm_def.get("env", {})).name
    rel = relative_for(ceiling, numerics)
    if rel is None:
        return None
    r = draft_cost_ratio(ceiling, arm_def.get("draft"), numerics)
    if not math.isfinite(r):
        return None
    n_max = arm_n_max(profile)
    draft_rel = draft_relative_for(ceiling, arm_def.get("draft"))
    best, at = 0.0, 1
    for k in range(1, n_max + 1):
        c = perfect_ceiling(rel, k, r, draft_rel)
        if c > best:
            best, at = c, k
    return ArmCeiling(name, best, at, n_max, r, numerics)


def prune(arm_defs: Mapping[str, Mapping[str, Any]], ceiling: Mapping[str, Any] | None,
          margin: float) -> tuple[list[str], dict[str, ArmCeiling]]:
    """Split speculative arms into those that may pay here and those that cannot (name → their ceiling).

    Arms the measurement does not cover, and non-speculative arms, are kept."""
    keep: list[str] = []
    cannot: dict[str, ArmCeiling] = {}
    for name, d in arm_defs.items():
        spec = d.get("profile", {}).get("spec_type", "auto")
        ac = arm_ceiling(name, d, ceiling) if ceiling and spec != "none" else None
        if ac is not None and not ac.pays(margin):
            cannot[name] = ac
        else:
            keep.append(name)
    return keep, cannot
