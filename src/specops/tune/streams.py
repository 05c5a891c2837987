"""The tune at the service's concurrency (issue 52 item 2): with ``--parallel N`` > 1 the candidate the one-stream
measurement chose (or, when it chose plain decoding, the best it measured) is measured again with N streams in
flight against plain decoding with N streams, and the choice is made for N.

This reuses the saturation soak (:mod:`specops.soak.saturation`) rather than a second load generator: both servers
at ``--parallel N`` with the unit's numerics (the same as the one-stream measurement), resident side by side and
loaded one at a time in alternating phases (ABBA), N clients each pinned to its slot, streamed requests from the
tune's own tasks. The figure is the service's **aggregate** decode throughput (tokens of every stream ÷ the phase's
wall time), paired per block (speculative ÷ plain), with a Student-t interval over the blocks; each stream's latency
(time to the first token, whole request; median and 95th percentile) is kept beside it, and ``/slots`` polled in
every phase says how many slots were seen processing at once (the evidence that N streams were in flight).

The rule at N is the one-stream rule: the candidate stands only when it is confidently faster than plain decoding
at N; confidently slower, plain decoding is served (settled); figures that reach both sides, plain decoding is
served, undecided; and the margin is the one at one stream (not confidently under 1 + margin).

Output identity at N (issue 62 item 1): requests batched with different partners may differ from one-stream
decoding in both arms alike, so at N the candidate is held to **plain decoding's own run-to-run difference rate**
there, not to byte identity. The plan sends the same tasks in the same order in two blocks running (one seed per
pair of blocks), so each task meets plain decoding twice with different batch partners: plain's rate is the share
of those repeats whose answer changed, the candidate's the share of its answers that differ from plain decoding's
answer to the same task (the same block's, else the nearest block's). Under rule *identical* the candidate stands
only where its rate is not higher beyond chance: a one-sided Fisher exact test on the four counts at
IDENTITY_LEVEL; where plain decoding was deterministic at N (no repeat changed) the candidate must be too (none of
its answers differs). Either side without a comparison is *not judged*: the candidate does not stand, undecided.
The record keeps both rates, the counts, the p-value and the rule that applied.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specops.bench.arms import BASELINE, on_unit, parse_arm
from specops.bench.design import deployable
from specops.bench.runner import BenchConfig
from specops.bench.stats import Interval, geomean_ratio_ci
from specops.server import ServerProcess
from specops.soak.saturation import PLAIN, SPEC, SaturationPlan, SaturationRunner

log = logging.getLogger(__name__)

MIN_PHASE_S = 10.0  # a phase shorter than this measures mostly the requests' ramp-up and tail
MAX_PHASE_S = 60.0
BLOCKS = 4  # paired blocks (one phase per arm each) when the time allows
START_S = 45.0  # two servers at --parallel N started, loaded and warmed (each slot once) before the first phase
OVERRUN_S = 60.0  # the one-stream measurement may end this much after its share (its last block, a loaded host)
SHARE = 0.3  # of the tune's budget, kept for the measurement at N streams
IDENTITY_LEVEL = 0.05  # one-sided: the candidate's difference rate above plain decoding's own beyond this chance
# issue 78 item 5: the most the candidate's share of changed answers may exceed plain decoding's own at N (the
# one-sided 95% upper bound of the difference, over tasks, must lie within it for the candidate to be served at N)
IDENTITY_BOUND = 0.20
Z95 = 1.6448536269514722  # the one-sided 95% normal quantile


def request_s(n: int, max_tokens: int, s_per_token: float) -> float:
    """A request's decode time at N streams, from the plain probe's time per token at one stream (N requests
    batched cost about N times one on a CPU; an upper bound where a batch is cheaper): a phase runs on until the
    requests in flight when it ends are answered, so each phase lasts up to this much past its plan (the N = 2
    tune on the 2-core demo host, 96 tokens: phases planned at 34 s ran 45–48 s; a plain request there took ~23 s).
    0 where the time per token is unknown."""
    return max(0.0, n * max_tokens * s_per_token)


def reserve_s(budget_s: float, tail_s: float = 0.0) -> float:
    """Seconds of the tune's budget kept for the measurement at N streams: SHARE of it, at least two blocks of the
    shortest phases each with a request's tail (:func:`request_s`), the servers' start and the one-stream
    measurement's overrun (without it, a lab tune under load had 40 s left at N, less than two blocks, and measured
    nothing there). The same ``tail_s`` goes to :func:`plan_for`, so the plan finds the two blocks this keeps."""
    return max(SHARE * budget_s, 2 * 2 * (MIN_PHASE_S + tail_s) + START_S + OVERRUN_S)


def wilson(x: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a share ``x``/``n`` (x may be fractional: a sum of per-task shares)."""
    if n <= 0:
        return 0.0, 1.0
    p = x / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def difference_bounds(xc: float, nc: int, xp: float, np_: int, z: float = Z95) -> tuple[float, float]:
    """One-sided ``z`` bounds (lower, upper) of the candidate's rate minus plain decoding's: Newcombe's hybrid score
    method (his method 10: each side's Wilson interval, combined as a square root of sums)."""
    pc, pp = xc / nc, xp / np_
    lc, uc = wilson(xc, nc, z)
    lp, up = wilson(xp, np_, z)
    d = pc - pp
    return d - math.sqrt((pc - lc) ** 2 + (up - pp) ** 2), d + math.sqrt((uc - pc) ** 2 + (pp - lp) ** 2)


@dataclass(frozen=True)
class IdentityAtN:
    """Plain decoding's own run-to-run difference at N against the candidate's difference from plain decoding.

    The rule puts the burden on the candidate (issue 78 item 5): it is served at N only when the data show that its
    share of changed answers is no more than plain decoding's own plus IDENTITY_BOUND (the one-sided 95% upper bound
    of the difference within it). Answers to one task are not independent: each task counts once, by the share of
    its answers that changed (``*_by_task``; without them each answer is its own task). Too few tasks to show it is
    *unproven at N* (holds None: plain decoding is served at N, undecided); a lower bound above 0 is a candidate
    that differs more often (holds False, settled)."""

    plain_compared: int  # plain answers compared with plain decoding's answer to the same task in another block
    plain_differed: int
    candidate_compared: int  # candidate answers compared with plain decoding's answer to the same task
    candidate_differed: int
    plain_by_task: tuple[float, ...] = ()  # per task with a repeat: the share of its repeats that changed
    candidate_by_task: tuple[float, ...] = ()  # per task: the share of the candidate's answers that differ

    def _tasks(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        def each(by_task: tuple[float, ...], x: int, n: int) -> tuple[float, ...]:
            return by_task or (1.0,) * x + (0.0,) * (n - x)
        return (each(self.plain_by_task, self.plain_differed, self.plain_compared),
                each(self.candidate_by_task, self.candidate_differed, self.candidate_compared))

    def bounds(self) -> tuple[float, float] | None:
        """The one-sided 95% bounds of the candidate's share of changed answers minus plain decoding's, over tasks."""
        plain, cand = self._tasks()
        if not plain or not cand:
            return None
        return difference_bounds(sum(cand), len(cand), sum(plain), len(plain))

    @staticmethod
    def rate(differed: int, compared: int) -> float | None:
        return differed / compared if compared else None

    @property
    def p_value(self) -> float | None:
        """One-sided Fisher exact test: the chance of the candidate differing this often or more were its rate
        plain decoding's own (None: a side without comparisons)."""
        if not self.plain_compared or not self.candidate_compared:
            return None
        return fisher_greater(self.candidate_differed, self.candidate_compared, self.plain_differed,
                              self.plain_compared)

    def judge(self, level: float = IDENTITY_LEVEL) -> tuple[bool | None, str]:
        """(holds, the rule that applied and what it found); holds None: not judged."""
        cand = f"{self.candidate_differed} of {self.candidate_compared} answers differ from plain decoding's"
        own = f"plain decoding's own repeats {self.plain_differed} of {self.plain_compared}"
        if not self.plain_compared or not self.candidate_compared:
            side = "plain decoding repeated no task" if not self.plain_compared else "no candidate answer compared"
            return None, f"output identity at N not judged: {side}"
        if not self.plain_differed and self.candidate_differed:
            return False, (f"plain decoding deterministic at N ({own}), so the candidate must be too: {cand}")
        plain, tasks = self._tasks()
        bounds = self.bounds()
        assert bounds is not None
        low, high = bounds
        shares = (f"{cand} ({len(tasks)} tasks, {sum(tasks) / len(tasks):.0%} of a task's answers on average) "
                  f"against {own} ({len(plain)} tasks, {sum(plain) / len(plain):.0%}): the difference is at most "
                  f"{high:+.0%} at 95%")
        if high <= IDENTITY_BOUND:
            return True, f"{shares}, within plain decoding's own rate + {IDENTITY_BOUND:.0%}"
        if low > 0:
            return False, f"{shares}, and at least {low:+.0%}: it differs more often than plain decoding"
        return None, (f"unproven at N: {shares}, not shown within plain decoding's own rate + "
                      f"{IDENTITY_BOUND:.0%} (too few tasks to show it)")

    def to_dict(self, level: float = IDENTITY_LEVEL) -> dict[str, Any]:
        holds, rule = self.judge(level)
        p = self.p_value
        return {"plain": {"compared": self.plain_compared, "differed": self.plain_differed,
                          "rate": self.rate(self.plain_differed, self.plain_compared)},
                "candidate": {"compared": self.candidate_compared, "differed": self.candidate_differed,
                              "rate": self.rate(self.candidate_differed, self.candidate_compared)},
                "p_value": None if p is None else round(p, 4), "level": level, "holds": holds, "rule": rule,
                "bound": IDENTITY_BOUND, "tasks": {"plain": len(self._tasks()[0]), "candidate": len(self._tasks()[1])},
                "difference": None if self.bounds() is None else [round(b, 4) for b in self.bounds() or ()]}


def fisher_greater(x1: int, n1: int, x0: int, n0: int) -> float:
    """P(X >= x1) for X hypergeometric: ``x1 + x0`` differences among ``n1 + n0`` comparisons, ``n1`` of them
    the candidate's (the one-sided Fisher exact test of a higher rate in the first row)."""
    k_all, n_all = x1 + x0, n1 + n0
    total = math.comb(n_all, n1)
    return sum(math.comb(k_all, k) * math.comb(n_all - k_all, n1 - k) for k in range(x1, min(k_all, n1) + 1)) / total


def identity_at_n(phases: list[dict[str, Any]]) -> IdentityAtN:
    """The counts of :class:`IdentityAtN` from the measurement's phases (each request's task id and answer
    digest, :func:`specops.soak.saturation.phase_record`)."""
    answers: dict[str, dict[int, list[tuple[str, str]]]] = {SPEC: {}, PLAIN: {}}
    for ph in phases:
        got = answers.get(ph["arm"])
        if got is None:
            continue
        got[ph["block"]] = [(r["task_id"], r["digest"]) for r in ph["requests"]
                            if r.get("kind") == "load" and r.get("outcome") != "failed" and r.get("digest")]
    plain_first: dict[str, dict[int, str]] = {}  # task -> block -> plain decoding's first answer in that block
    for block, got in sorted(answers[PLAIN].items()):
        for task, digest in got:
            plain_first.setdefault(task, {}).setdefault(block, digest)
    p_cmp = p_diff = 0
    plain_tasks: list[float] = []
    for by_block in plain_first.values():
        digests = [by_block[b] for b in sorted(by_block)]
        changed = sum(d != digests[0] for d in digests[1:])
        p_cmp += len(digests) - 1
        p_diff += changed
        if len(digests) > 1:
            plain_tasks.append(changed / (len(digests) - 1))
    c_cmp = c_diff = 0
    per_task: dict[str, list[bool]] = {}
    for block, got in answers[SPEC].items():
        for task, digest in got:
            by_block = plain_first.get(task)
            if not by_block:
                continue
            ref = by_block[min(by_block, key=lambda b: (abs(b - block), b))]
            c_cmp += 1
            c_diff += digest != ref
            per_task.setdefault(task, []).append(digest != ref)
    cand_tasks = tuple(sum(v) / len(v) for v in per_task.values())
    return IdentityAtN(p_cmp, p_diff, c_cmp, c_diff, tuple(plain_tasks), cand_tasks)


@dataclass(frozen=True)
class AtN:
    """One candidate against plain decoding at N streams."""

    n: int
    candidate: str
    speedup: Interval | None  # aggregate tok/s, speculative ÷ plain, over the paired blocks
    tokens_per_s: dict[str, float | None] = field(default_factory=dict)  # per arm (speculative, plain)
    latency_s: dict[str, dict[str, Any]] = field(default_factory=dict)  # per arm: ttft and total, p50 / p95
    in_flight: dict[str, int] = field(default_factory=dict)  # per arm: the most slots one /slots poll saw processing
    blocks: int = 0
    seconds: float = 0.0
    problems: tuple[str, ...] = ()
    identity: IdentityAtN | None = None

    def fmt(self) -> str:
        return self.speedup.fmt() if self.speedup else "not measured"

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "candidate": self.candidate, "measured": self.fmt(),
                "speedup": self.speedup.to_dict() if self.speedup else None, "tokens_per_s": self.tokens_per_s,
                "latency_s": self.latency_s, "streams_in_flight": self.in_flight, "blocks": self.blocks,
                "seconds": round(self.seconds, 1), "problems": list(self.problems),
                "identity": self.identity.to_dict() if self.identity else None}


def fitting_n(n: int, need: Callable[[int], int], room: int) -> int:
    """The largest m <= ``n`` at which ``need(m)`` (the bytes of both servers at ``--parallel m``, side by side as
    :func:`measure` runs them) fits in ``room``; 0 where not even one slot each does."""
    return next((m for m in range(n, 0, -1) if need(m) <= room), 0)


def plan_for(n: int, seconds: float, max_tokens: int, task_files: tuple[str, ...],
             workloads: tuple[str, ...], tail_s: float = 0.0) -> SaturationPlan | None:
    """The saturation plan whose phases, each with its tail (``tail_s``: :func:`request_s`), fit ``seconds`` (both
    arms): BLOCKS blocks of phases between MIN_PHASE_S and MAX_PHASE_S, fewer blocks where the time is short, more
    where the longest phases leave room; None where not even two blocks fit."""
    tail = max(0.0, tail_s)
    phase = min(MAX_PHASE_S, max(MIN_PHASE_S, seconds / (2 * BLOCKS) - tail))
    blocks = math.floor(seconds / (2 * (phase + tail)) + 1e-9)  # the reserve's exact two blocks stay two
    if blocks < 2:
        return None
    return SaturationPlan(levels=(n,), duration=blocks * 2 * phase, phase=phase, faults=(), max_tokens=max_tokens,
                          request_timeout=max(120.0, 4 * phase), recovery_timeout=60.0, task_files=task_files,
                          workloads=workloads, slots_interval=0.5, blocks_per_order=2)


def measure(cfg: BenchConfig, name: str, n: int, plan: SaturationPlan, log_dir: Path) -> AtN:
    """``name`` (a candidate of the one-stream measurement) against plain decoding, both at ``--parallel n``."""
    arms = {SPEC: on_unit(parse_arm(name)), PLAIN: on_unit(parse_arm(BASELINE))}
    profiles = {arm: replace(cfg.profile_for(a), parallel=n) for arm, a in arms.items()}
    ports: dict[str, int] = {}

    def make(arm: str, level: int, generation: int) -> ServerProcess:
        server = ServerProcess(cfg.server_binary, profiles[arm], cfg.caps,
                               log_path=log_dir / f"n{level}-{arm}-{generation}.log", port=ports.get(arm))
        ports[arm] = server.profile.port
        return server

    result = SaturationRunner(plan, make, run_id=f"tune-n{n}").run()
    if not result.levels:
        return AtN(n, name, None, problems=tuple(result.notes or ["nothing measured"]), seconds=result.duration_s)
    level = result.levels[0]
    ratios = [r for r in level["block_ratios"] if r > 0 and math.isfinite(r)]
    arms_out = level["arms"]
    return AtN(
        n, name, geomean_ratio_ci(ratios) if ratios else None,
        tokens_per_s={arm: arms_out[arm]["tokens_per_s"] for arm in (SPEC, PLAIN)},
        latency_s={arm: {"ttft": arms_out[arm]["ttft_s"], "total": arms_out[arm]["total_s"]} for arm in (SPEC, PLAIN)},
        in_flight={arm: arms_out[arm]["slots_processing_at_once"] for arm in (SPEC, PLAIN)},
        blocks=len(ratios), seconds=result.duration_s, problems=tuple(level["problems"]),
        identity=identity_at_n(result.phases))


def verdict(at: AtN, margin: float = 0.05, need_identical: bool = True) -> tuple[bool, bool, str]:
    """(the candidate stands at N, settled, why): it stands only when deployable at N by the rule at one stream
    (:func:`specops.bench.design.deployable`: confidently faster than plain decoding, and not confidently under
    1 + ``margin``; issue 62 item 2) and, under rule *identical* (``need_identical``), its answers differ from plain
    decoding's no more often than plain decoding's own do at N (:meth:`IdentityAtN.judge`; issue 62 item 1)."""
    what = f"{at.candidate} at {at.n} streams {at.fmt()} against plain decoding at {at.n} streams ({at.blocks} blocks)"
    holds, rule = at.identity.judge() if at.identity else (None, "output identity at N not judged: no answers")
    if need_identical and holds is False:
        return False, True, f"output differs at {at.n} streams: {rule} ({what})"
    if at.speedup is None or not at.speedup.has_ci:
        return False, False, f"undecided at {at.n} streams: {what}: too few blocks for an interval"
    if deployable(at.speedup, margin):
        if need_identical and holds is None:
            return False, False, f"undecided at {at.n} streams: {what}: {rule}"
        return True, True, f"{what}; {rule}"
    if at.speedup.significantly_below(1.0 + margin) and not at.speedup.significantly_below(1.0):
        return False, True, f"no gain worth deploying at {at.n} streams: {what}: wholly under 1 + {margin:.0%}"
    if at.speedup.significantly_below(1.0):
        return False, True, f"slower at {at.n} streams: {what}"
    return False, False, f"undecided at {at.n} streams: {what}: the interval reaches both sides of plain decoding"
