"""The tune's candidates and its short probes: one server at a time, a few prompts each, counters read back.

Candidates are named in the bench's arm grammar (:mod:`specops.bench.arms`) with the service's numerics
(``-fa on -ctv q8_0``, the knob table's defaults, so identity is judged against a plain server of the same
numerics): ``exact-n<K>`` for the draft model at length K, ``exact-<ngram type>`` for each n-gram type the build
has, ``exact-spec-default`` for llama.cpp's own default config. The probes run each server alone on the machine
(loaded, warmed up, the prompts one after another, stopped), so their seconds are the server's own: the plain
server gives the per-token overhead, the draft probes at the longest and the shortest length the per-round
terms and the per-position acceptance, each n-gram probe its own acceptance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specops.bench.arms import Arm, parse_arm
from specops.bench.costmodel import Run
from specops.bench.runner import BenchConfig, Loaded
from specops.bench.store import ResultStore
from specops.bench.tasks import Task

PLAIN_ARM = "exact-baseline"
# the n-gram types in the order they are probed when the budget is short: llama.cpp's own default type first
NGRAM_ORDER = ("ngram-mod", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache")
DEFAULT_ARM = "exact-spec-default"
# what llama.cpp's --spec-default is, per build commit it was read from: at 0c1e57098 (common/arg.cpp) it pushes
# ngram-mod with n_match 24, n_min 48, n_max 64, which are ngram-mod's own defaults (common/common.h): the same
# server as ``exact-ngram-mod``, so the tune probes and measures it once, under that name
DEFAULT_IS = {"0c1e57098": "ngram-mod"}


def engine_default(commit: str | None) -> str | None:
    """The candidate that is llama.cpp's own default speculative config on a build (None: not known for it)."""
    same = DEFAULT_IS.get((commit or "")[:9])
    return ngram_candidate(same) if same else None


def draft_candidate(k: int) -> str:
    return f"exact-n{k}"


def ngram_candidate(spec_type: str) -> str:
    return f"exact-{spec_type}"


def candidates(lengths: Sequence[int], has_draft: bool, spec_types: Sequence[str], ngram: Sequence[str] | None,
               with_default: bool = True, commit: str | None = None) -> list[str]:
    """The candidate arms: draft lengths (with a draft model), the n-gram types asked for (None: every one the
    build lists) and llama.cpp's default config where the build has it (once: where it is known to be one of the
    n-gram types on this build's commit, that type stands for it)."""
    out = [draft_candidate(k) for k in sorted(set(lengths))] if has_draft else []
    types = [t for t in NGRAM_ORDER if t in spec_types] if ngram is None else list(ngram)
    out += [ngram_candidate(t) for t in types]
    same = engine_default(commit)
    if with_default and same is None:
        out.append(DEFAULT_ARM)
    elif with_default and same not in out:
        out.append(same)
    return out


@dataclass
class ProbeResult:
    arm: str
    run: Run
    per_pos: dict[str, float] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {"arm": self.arm, "n_tokens": r.n_tokens, "seconds": r.seconds, "drafts": r.drafts,
                "drafted": r.drafted, "accepted": r.accepted, "per_pos": self.per_pos, "error": self.error}


def probe_arm(arm: Arm, cfg: BenchConfig, store: ResultStore, tasks: Sequence[Task]) -> ProbeResult:
    """Load ``arm``'s server alone, send ``tasks`` one after another, read its counters, stop it. The seconds
    are the server's own decode time (``timings.predicted_ms``), so a slow client does not count."""
    loaded = Loaded(arm, cfg, store, rep=0)
    try:
        loaded.counters_delta()  # the warm-up's drafts are not the probe's
        n = secs = 0.0
        texts: dict[str, str] = {}
        for task in tasks:
            res = loaded.send(task, cfg)
            n += res.n_predicted
            secs += float(res.timings.get("predicted_ms") or 0.0) / 1e3
            texts[task.id] = res.text
        c = loaded.counters_delta()
    finally:
        loaded.close()
    run = Run(n, secs, float(c["drafts"]), float(c["draft_tokens"]), float(c["accepted"]))
    return ProbeResult(arm.name, run, {str(k): float(v) for k, v in c["per_pos"].items()}, texts)


def probe(name: str, cfg: BenchConfig, store: ResultStore, tasks: Sequence[Task],
          note: Callable[[str], None]) -> ProbeResult:
    """Arm ``name`` probed (:func:`probe_arm`); a server that fails to start or to speculate is kept as an error (its
    candidate cannot be predicted), never a crash of the tune."""
    note(f"tune: probing {name} ({len(tasks)} prompts, alone on the machine)")
    try:
        return probe_arm(parse_arm(name), cfg, store, tasks)
    except Exception as exc:  # a candidate that cannot run is a finding, not a crash of the tune
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        note(f"tune: {name} could not be probed: {first}")
        return ProbeResult(name, Run(0, 0), error=first)
