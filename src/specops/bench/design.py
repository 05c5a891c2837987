"""The paired, sequential design of the bench: which task runs next on which arms, and when an arm stops.

**Blocks.** A block is one task run once on the baseline server, once on a second baseline server (the
A/A check) and once on every arm still running for the task's workload, in an order shuffled per block.
All servers stay loaded side by side, so the slow drift of a shared machine hits every request of a block
alike and cancels in the ratios formed inside the block.

**Ratios.** In a block, an arm's ratio is its decode tok/s divided by the geometric mean of the two
baselines' tok/s; the A/A ratio is baseline-again ÷ baseline. Per task the block ratios are averaged
(geometric mean over repetitions); the 95% interval is a Student-t interval on the per-task log ratios:
the tasks are the sample, so the interval speaks for the workload, not only for the tasks that ran
(:mod:`specops.bench.estimates`).

**Stopping.** Per arm and workload, once ``min_tasks`` tasks are in, the arm stops running that workload
as soon as its interval settles the question the recommendation asks: wholly below 1.0 (*slower*), wholly
below 1 + ``half_width`` (no gain worth deploying), wholly above 1.0 (*faster*), or a relative half-width of
at most ``half_width`` (*precise*). ``stop_on`` names which of those may stop an arm early (all four by
default); :data:`FUTILITY` (*slower*, *no gain*) stops only an arm that cannot pay on the workload, so a stop
can only leave plain decoding served there, while a gain runs until the workload's tasks are used up: a sample
that stops the moment it first looks confidently faster overstates that confidence (``specops tune``). With
``identity_stop`` (rule *identical*), an arm whose answer differs from its reference's in any block stops there
(*output differs*): that rule can never pick it for the workload, so more measurement cannot change the
recommendation. When the workload's tasks are used up it ends *exhausted*; a budget that runs out ends the rest
*budget*. Stopping is decided after every block; the report states that the intervals are per-look 95% intervals.

**Shares** (``specops tune``: the traffic's mix, or the task set's own shares): a workload without a share is not
measured at all, and the blocks go where they settle the whole figure soonest (:mod:`specops.bench.allocate`: each
workload's share times its spread, planned again after every block) instead of taking turns. The stops then look at
the **whole figure** (the shares' speedup weighted by time, :mod:`specops.bench.weighted`), not at one workload: an
arm stops everywhere once that figure is *slower* or *no gain* at ``whole_level`` (99% by default: the looks after
every block would otherwise stop a true 5% gain for futility far more often than 2.5%), where ``stop_on`` allows
them, or *faster* at the **error budget**'s boundary whatever ``stop_on`` says (:func:`arm_level`, issue 79): over
the whole run, every look and the final choice included, a candidate whose true speedup is 1.00 is served at most
2.5% of the time, one-sided: shared over the candidates in their order (held-back ones included; the first 70%, the
rest evenly; one stopped *faster* passes its share on: Bretz et al.'s graph), each candidate's share spent on an
O'Brien–Fleming boundary in the tasks measured ÷ the cap (strict early, most kept for the last look: the choice's).
The futility stops can only leave plain decoding served, so they spend none of it. The measurement ends when every
arm is decided, so a tune ends when it has decided, not when its budget does.

**Conclusions** (what the report and the recommendation read): *slower* (interval below 1), *faster*
(interval above 1), *no gain* (interval below 1 + ``half_width``, or around 1.0 within it), or
*inconclusive* with the reason (budget, tasks used up, too few tasks): :mod:`specops.bench.verdict`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from specops.bench import allocate
from specops.bench.arms import AA, BASELINE
from specops.bench.estimates import Estimates
from specops.bench.stats import Interval
from specops.bench.verdict import FASTER, NO_GAIN, SLOWER, arm_level, at_level, conclusion, deployable, rel_half_width

PRECISE = "precise"  # a stop, not a conclusion: the interval is narrow enough, whichever side of 1 it lies
DIFFERS = "output differs"  # under rule 'identical': disqualified whatever its speed
CONFIDENT = (SLOWER, FASTER, NO_GAIN, DIFFERS)
STOPS = (SLOWER, FASTER, NO_GAIN, PRECISE)  # what may stop an arm early, in the order they are tested
FUTILITY = frozenset({SLOWER, NO_GAIN})  # the stops that can only leave plain decoding served on the workload
WHOLE = "on the whole"  # suffix of a stop judged on the shares' whole figure ("faster on the whole", ...)
# the whole figure's degrees of freedom (tasks less workloads) before it may stop anything: three tasks of a workload
# that happen to agree must not speak for it (a recorded CPU tune's first three edits read 1.02-1.04x, its other three
# 1.08-1.42x)
WHOLE_DF = 6
RESERVED = "reserve"  # a held-back arm's status until it is measured
UNSETTLED = "cannot settle"  # the whole figure could not settle were every task left measured


@dataclass(frozen=True)
class Block:
    """What to run next: ``task`` of ``workload`` in repetition ``rep`` on ``arms`` (baselines included)."""

    index: int
    rep: int
    workload: str
    task: str
    arms: tuple[str, ...]


@dataclass
class Status:
    """Where one arm stands on one workload."""

    stopped: str | None = None  # None while running; slower | faster | no gain | precise | exhausted | budget | …
    done: dict[int, int] = field(default_factory=dict)  # rep -> tasks done in that rep


class Design(Estimates):
    """Sequential state of a run: feed it finished blocks, ask it for the next one.

    ``tasks``: ``{workload: [task ids in run order]}``. ``arms``: the speculative arms (not the baselines).
    ``min_tasks = None`` never stops an arm early (the exhaustive reference run). ``references``:
    ``{arm: [arms whose output it is the identity reference for]}``; such an arm runs exactly as long
    as one of those does. ``stop_on``: the stops of :data:`STOPS` that may end an arm's workload before its
    tasks are used up (default all; :data:`FUTILITY` for a choice that must not stop on a gain that first looks
    confident); *output differs* (``identity_stop``) is not one of them and always stops. With ``shares`` the whole
    figure stops for futility at ``whole_level`` and as *faster* at ``serve_level`` (None: the run's error budget,
    :func:`arm_level` over the candidates measured), whatever ``stop_on`` says of *faster*: that boundary is the one
    the final choice reads too.
    """

    def __init__(
        self,
        arms: Sequence[str],
        tasks: Mapping[str, Sequence[str]],
        reps: int = 1,
        min_tasks: int | None = 4,
        half_width: float = 0.05,
        seed: int = 42,
        aa: bool = True,
        references: Mapping[str, Sequence[str]] | None = None,
        fpc: bool = True,
        aa_precision: float | None = 0.025,
        identity_stop: bool = False,
        stop_on: Iterable[str] = STOPS,
        allow_near_ties: bool = False,
        shares: Mapping[str, float] | None = None,
        whole_level: float = 0.99,
        reserve: Sequence[str] = (),
        serve_level: float | None = None,
    ) -> None:
        if reps < 1:
            raise ValueError("reps must be >= 1")
        self.stop_on = frozenset(stop_on)
        if not self.stop_on <= set(STOPS):
            raise ValueError(f"stop_on: {', '.join(sorted(self.stop_on - set(STOPS)))} not among {', '.join(STOPS)}")
        self.arms = list(arms)
        self.tasks = {w: list(ts) for w, ts in tasks.items() if ts}
        # with shares: the workloads with a share and a task (the others are never measured, said in unshared)
        self.shares: dict[str, float] | None = None
        self.unshared: list[str] = []
        if shares is not None:
            positive = {w: float(v) for w, v in shares.items() if float(v) > 0 and w in self.tasks}
            if not positive:
                raise ValueError("shares: no workload with a share above zero has a task")
            total = sum(positive.values())
            self.shares = {w: v / total for w, v in positive.items()}
            self.unshared = [w for w in self.tasks if w not in self.shares]
            self.tasks = {w: ts for w, ts in self.tasks.items() if w in self.shares}
        self.whole_level = whole_level  # the whole figure's futility stops (slower, no gain)
        self._serve_level = serve_level  # its faster stop (None: the error budget's, serve_level())
        self.why: dict[int, str] = {}  # block index -> why its workload was chosen (with shares)
        self.workloads = list(self.tasks)
        self.reps = reps
        self.min_tasks = min_tasks
        self.half_width = half_width
        self.seed = seed
        self.aa = aa
        self.references = {r: list(d) for r, d in (references or {}).items() if r in arms}
        self.fpc = fpc
        self.aa_precision = aa_precision
        self.identity_stop = identity_stop
        # rule 'equivalent' (issue 78): a difference explained as a near-tie does not stop an arm
        self.allow_near_ties = allow_near_ties
        self.reference_of = {d: r for r, ds in self.references.items() for d in ds}
        # per (arm, workload): tasks whose answer differed from the reference's in the same block
        self.differs: dict[str, dict[str, set[str]]] = {}
        self.status = {a: {w: Status() for w in self.workloads} for a in self.arms}
        # with shares: arms held back (in this order) until a running one is on course to clear the margin, then
        # measured beside it one at a time (issue 61 item 2: the best type on the traffic that pays)
        self.reserve = [a for a in reserve if a in self.status] if self.shares is not None else []
        self.activated: dict[str, str] = {}  # reserve arm -> why it was measured
        for a in self.reserve:
            for st in self.status[a].values():
                st.stopped = RESERVED
        # per (arm, workload, task): block ratios; baselines' A/A ratios under AA
        self.ratios: dict[str, dict[str, dict[str, list[float]]]] = {}
        self.blocks = 0
        self.plain_s: dict[str, dict[str, list[float]]] = {}  # the baseline's decode seconds per workload and task
        self._rr = 0
        self._turns: dict[str, int] = {}  # blocks ordered so far per workload (position rotation)
        self._turn_of: dict[int, int] = {}  # block index -> its turn

    # ---- feeding ----------------------------------------------------------------------------
    def add(self, block: Block, tps: Mapping[str, float | None],
            texts: Mapping[str, str | None] | None = None, plain_s: float | None = None,
            near_ties: Collection[str] = ()) -> None:
        """Record a finished block: decode tok/s per server that ran it (None: no usable rate), for the identity
        stop each server's answer, and the baseline's decode seconds (the whole figure weighs tasks by them).
        ``near_ties``: the arms whose answer differs from the reference's by an explained near-tie
        (:mod:`specops.bench.explain`), which does not stop them where near-ties are allowed."""
        self.blocks = max(self.blocks, block.index + 1)
        if plain_s:
            self.plain_s.setdefault(block.workload, {}).setdefault(block.task, []).append(plain_s)
        if self.identity_stop and texts:
            for arm in block.arms:
                ref = self.reference_of.get(arm, BASELINE)
                if arm in (BASELINE, AA) or arm not in self.status or texts.get(arm) is None:
                    continue
                if self.allow_near_ties and arm in near_ties:
                    continue
                if texts.get(ref) is not None and texts[arm] != texts[ref]:
                    self.differs.setdefault(arm, {}).setdefault(block.workload, set()).add(block.task)
        base = tps.get(BASELINE)
        again = tps.get(AA) if self.aa else None
        for arm in block.arms:
            if arm in self.status:
                st = self.status[arm][block.workload]
                st.done[block.rep] = st.done.get(block.rep, 0) + 1
        if not base or base <= 0:
            return
        denom = math.sqrt(base * again) if again and again > 0 else base
        if again and again > 0:
            self._ratio(AA, block.workload, block.task, again / base)
        for arm in block.arms:
            if arm in (BASELINE, AA) or arm not in self.status:
                continue
            v = tps.get(arm)
            if v and v > 0:
                self._ratio(arm, block.workload, block.task, v / denom)
        self._decide(block.workload)

    def _ratio(self, arm: str, wl: str, task: str, r: float) -> None:
        self.ratios.setdefault(arm, {}).setdefault(wl, {}).setdefault(task, []).append(r)

    def fail(self, arm: str, why: str) -> None:
        """An arm whose server died or answered garbage stops everywhere."""
        for st in self.status.get(arm, {}).values():
            if st.stopped is None:
                st.stopped = f"failed: {why}"
        for wl in self.workloads:
            self._decide(wl)

    def out_of_budget(self) -> None:
        for rows in self.status.values():
            for st in rows.values():
                if st.stopped is None:
                    st.stopped = "budget"


    def alive(self, wl: str) -> list[str]:
        return [a for a in self.arms if self.status[a][wl].stopped is None]

    def running(self) -> list[str]:
        """Arms still running on at least one workload."""
        return [a for a in self.arms if any(st.stopped is None for st in self.status[a].values())]

    def needs(self, arm: str, rep: int) -> bool:
        """Does ``arm`` still have tasks to run in repetition ``rep``?"""
        return any(st.stopped is None and st.done.get(rep, 0) < len(self.tasks[w])
                   for w, st in self.status[arm].items())

    def conclusion(self, arm: str, wl: str) -> str:
        return conclusion(self.interval(arm, wl), self.half_width)

    # ---- deciding ---------------------------------------------------------------------------
    def _decide(self, wl: str) -> None:
        if self.min_tasks is None:
            return
        if self.shares is not None:
            self._decide_whole()
            return
        for arm in self.alive(wl):
            if arm in self.references:
                continue
            if self.differs.get(arm, {}).get(wl):
                self.status[arm][wl].stopped = DIFFERS
                continue
            if self.n_tasks(arm, wl) < self.min_tasks:
                continue
            iv = self.interval(arm, wl)
            if iv is None or not iv.has_ci:
                continue
            self.status[arm][wl].stopped = self.early_stop(iv)
        self._release_references([wl])

    def _release_references(self, workloads: Iterable[str]) -> None:
        """A reference arm stops on a workload once every arm it is the identity reference for has."""
        for ref, dependents in self.references.items():
            for wl in workloads:
                st = self.status[ref][wl]
                if st.stopped is None and all(self.status[d][wl].stopped is not None for d in dependents):
                    st.stopped = "reference no longer needed"

    def candidates(self) -> list[str]:
        """The candidates the error budget is shared over, in order: every arm but identity references, the held-back
        ones from the start (counted as they came in, a gain stopped as *faster* would be chosen at a stricter level
        than it stopped at: a true 1.20 not served in a quarter of the runs); the final choice shares it over those
        measured, in the same order, so it never reads stricter than the looks did."""
        return [a for a in self.arms if a not in self.references]

    def serve_level(self, fraction: float = 1.0, arm: str | None = None) -> float:
        """``arm``'s *faster* stop's level at information ``fraction`` (tasks measured ÷ the cap): the one given, else
        the error budget's (:func:`arm_level` over :meth:`candidates`, those stopped *faster* passing shares on)."""
        shown = [a for a in self.arms if f"{FASTER} {WHOLE}" in {st.stopped for st in self.status[a].values()}]
        return self._serve_level or arm_level(self.candidates(), shown, arm, fraction)  # a level is never 0

    def _decide_whole(self) -> None:
        """With shares: an arm whose output differed anywhere stops everywhere (the identity rule can never pick
        it); an arm stops everywhere once the whole figure settles a stop of ``stop_on`` at ``whole_level`` or
        *faster* at :meth:`serve_level` (every workload with a share has ``min_tasks`` tasks of it, its warm-up, and
        the figure :data:`WHOLE_DF` degrees of freedom)."""
        for arm in self.running():
            if arm in self.references:
                continue
            rows = self.status[arm]
            if any(self.differs.get(arm, {}).values()):
                for st in rows.values():
                    st.stopped = st.stopped or DIFFERS
                continue
            counts = [self.n_tasks(arm, w) for w in self.workloads]
            if not self._warmed(arm) or sum(counts) - len(counts) < WHOLE_DF:
                continue  # every workload with a share its warm-up first (one spread must not speak for another)
            iv = self.whole(arm)
            if iv is None or not iv.has_ci:
                continue
            fraction = sum(counts) / sum(len(self.tasks[w]) for w in self.workloads)
            stop = self.whole_stop(iv, fraction, arm) or (UNSETTLED if fraction >= 0.5 and not self.can_settle(arm, iv)
                                                          else None)
            if stop is not None:
                for st in rows.values():
                    st.stopped = st.stopped or f"{stop} {WHOLE}"
        self._release_references(self.workloads)
        self._activate()

    def _warmed(self, arm: str) -> bool:
        return all(self.n_tasks(arm, w) >= min(self.warm, len(self.tasks[w])) for w in self.workloads)

    def _activate(self) -> None:
        """With a reserve: once no held-back arm is being measured and a measured arm pays (deployable at 95%:
        confidently faster than plain decoding and not confidently under 1 + ``half_width``, on the whole or on a
        workload with its warm-up) or is on course to on the whole (:meth:`on_course`: at 1 + ``half_width`` with a
        final interval that would clear 1 at its spread), the next held-back arm is measured beside it on every
        workload with a share, its warm-up on the tasks the leader already ran. (On a bare point estimate, a 2-core
        CPU tune brought two types in at 1.08x [0.89, 1.31] and spent 10 of its 35 blocks on their warm-ups.)"""
        pending = [a for a in self.reserve if a not in self.activated]
        if not pending or any(a in self.running() for a in self.activated):
            return
        for arm in (a for a in self.arms if a not in self.reserve or a in self.activated):
            if arm in self.references:
                continue
            whole = self.whole(arm)
            why = ""
            if whole is not None and deployable(whole, self.half_width):
                why = f"{arm} pays on the whole ({whole.fmt()})"
            elif whole is not None and self._warmed(arm) and self.on_course(arm, whole):
                why = f"{arm} on course to pay on the whole ({whole.fmt()}, at its spread over every task)"
            for wl in self.workloads:
                iv = self.interval(arm, wl)
                if not why and iv is not None and iv.n >= self.warm and deployable(iv, self.half_width):
                    why = f"{arm} pays on {wl} ({iv.fmt()} on {iv.n} tasks)"
            if why:
                nxt = pending[0]
                self.activated[nxt] = why
                for st in self.status[nxt].values():
                    st.stopped = None
                return

    def can_settle(self, arm: str, iv: Interval) -> bool:
        """Could the whole figure still settle (deployable at the last look's :meth:`serve_level`, or no gain or
        slower at 95%) were every task left measured (:meth:`projection`): some estimate within reach leaving the
        final interval wholly above 1 at the serving level, or wholly below 1 + ``half_width`` at 95%, as the choice
        reads them? A figure that cannot is *unsettled*: more blocks cannot change the answer (plain decoding,
        undecided), so the measurement ends and says what would settle it (a 2-core CPU tune with 12 edits in its
        task file spent 9 more prose blocks after its edits ran out). Looked at once half the tasks are in."""
        proj, serve = self.projection(arm), self.projection(arm, self.serve_level(1.0, arm))
        if proj is None or serve is None:
            return True
        half, reach = proj
        est = math.log(iv.estimate)
        return est + reach - serve[0] > 0 or est - reach + half < math.log(1.0 + self.half_width)

    def on_course(self, arm: str, iv: Interval) -> bool:
        """Is the whole figure on course to pay: at least 1 + ``half_width`` now, and its final interval (every task
        measured, :meth:`projection`) wholly above 1 if the estimate held?"""
        proj = self.projection(arm)
        return (proj is not None and iv.estimate >= 1.0 + self.half_width
                and math.log(iv.estimate) - proj[0] > 0)

    def whole_stop(self, iv: Interval, fraction: float = 1.0, arm: str | None = None) -> str | None:
        """``arm``'s whole figure's stop, from its 95% interval ``iv`` at information ``fraction``: *slower*, then *no
        gain* (confidently under 1 + ``half_width``: a 1.02x [1.005, 1.035] is faster than plain decoding but not
        worth deploying, and stops as no gain), each at ``whole_level`` and where ``stop_on`` allows it, then *faster*
        (deployable: wholly above 1 at :meth:`serve_level` of ``fraction``, the error budget's boundary, and not
        confidently under 1 + ``half_width``: what the final choice may serve), whatever ``stop_on`` says of
        *faster*."""
        futile = at_level(iv, self.whole_level)
        if futile.significantly_below(1.0) and SLOWER in self.stop_on:
            return SLOWER
        if futile.significantly_below(1.0 + self.half_width) and NO_GAIN in self.stop_on:
            return NO_GAIN
        return FASTER if deployable(iv, self.half_width, self.serve_level(fraction, arm)) else None

    def early_stop(self, iv: Interval) -> str | None:
        """The first stop of :data:`STOPS` the interval settles that ``stop_on`` allows (None: keep running).

        Tested in the bench's order, so with every stop allowed nothing changes; with :data:`FUTILITY` an interval
        above 1 but wholly below 1 + ``half_width`` stops as *no gain* (it cannot pay what deploying it costs)."""
        settles = {SLOWER: iv.significantly_below(1.0), FASTER: iv.significantly_above(1.0),
                   NO_GAIN: iv.significantly_below(1.0 + self.half_width),
                   PRECISE: rel_half_width(iv) <= self.half_width}
        return next((s for s in STOPS if s in self.stop_on and settles[s]), None)

    def order(self, wl: str, rep: int) -> list[str]:
        """The workload's tasks in this repetition's order (shuffled, reproducible from the seed)."""
        tasks = list(self.tasks[wl])
        random.Random(f"{self.seed}:{wl}:{rep}").shuffle(tasks)
        return tasks

    def next_block(self, rep: int, loaded: Iterable[str] | None = None) -> Block | None:
        """The next block of repetition ``rep`` (None: this repetition is done for every running arm).

        Workloads take turns, so a budget that ends the run leaves each of them partly explored rather
        than some untouched. ``loaded``: the arms whose servers are up (all when None)."""
        ready = set(self.arms if loaded is None else loaded)
        if self.shares is not None:
            return self._allocated(rep, ready)
        n = len(self.workloads)
        for i in range(n):
            wl = self.workloads[(self._rr + i) % n]
            arms = self._open(wl, rep, ready)
            if not arms:
                continue
            self._rr = (self._rr + i + 1) % n
            return self._block(wl, rep, arms)
        return None

    def _block(self, wl: str, rep: int, arms: list[str]) -> Block:
        """The next block of ``wl``: the next task of the arms furthest behind there, with the baselines."""
        pos = min(self.status[a][wl].done.get(rep, 0) for a in arms)
        arms = [a for a in arms if self.status[a][wl].done.get(rep, 0) == pos]
        block_arms = (BASELINE, *((AA,) if self.aa and self.aa_needed(wl) else ()), *arms)
        return Block(self.blocks, rep, wl, self.order(wl, rep)[pos], block_arms)

    def _open(self, wl: str, rep: int, ready: set[str]) -> list[str]:
        """The ready arms still running on ``wl`` with a task left in ``rep`` (those out of tasks end *exhausted*)."""
        arms = [a for a in self.alive(wl) if a in ready]
        size = len(self.tasks[wl])
        for a in arms:
            if self.status[a][wl].done.get(rep, 0) >= size and rep + 1 >= self.reps:
                self.status[a][wl].stopped = "exhausted"
        return [a for a in arms if self.status[a][wl].done.get(rep, 0) < size]

    @property
    def warm(self) -> int:
        """With shares: the tasks of every workload before its spread is weighed and the whole figure may stop."""
        return max(allocate.WARM, self.min_tasks or 0)

    def _allocated(self, rep: int, ready: set[str]) -> Block | None:
        """With shares: the workload whose next task narrows the whole figure most (:func:`allocate.pick`), its
        reason kept in :attr:`why`."""
        assert self.shares is not None
        open_ = {wl: arms for wl in self.workloads if (arms := self._open(wl, rep, ready))}
        if not open_:
            return None
        running = self.running()
        done = {wl: min((self.n_tasks(a, wl) for a in running), default=0) for wl in self.workloads}
        spreads = {wl: allocate.spread([[math.log(r) for r in self.task_ratios(a, wl).values()] for a in running])
                   for wl in self.workloads}
        wl, why = allocate.pick(self.shares, done, spreads, list(open_), warm=self.warm)
        self.why[self.blocks] = why
        return self._block(wl, rep, open_[wl])

    def allocation(self) -> str:
        """The blocks per workload so far, for the progress line: ``edit 7 of 12, prose 4 of 12, code share 0``."""
        blocks: dict[str, int] = {}
        for arm_rows in self.status.values():
            for wl, st in arm_rows.items():
                blocks[wl] = max(blocks.get(wl, 0), sum(st.done.values()))
        parts = [f"{wl} {blocks.get(wl, 0)} of {len(self.tasks[wl])}" for wl in self.workloads]
        return ", ".join(parts + [f"{wl} share 0" for wl in self.unshared])

    def finish_rep(self, rep: int) -> None:
        """After the last repetition, arms that ran out of tasks end *exhausted*."""
        if rep + 1 < self.reps:
            return
        for rows in self.status.values():
            for st in rows.values():
                if st.stopped is None:
                    st.stopped = "exhausted"

    def aa_needed(self, wl: str) -> bool:
        """The A/A check runs in a workload's blocks until it has ``min_tasks`` of them there and, pooled over
        the run, its interval is within ±``aa_precision``: after that it has shown what it is for (the design
        cancels the machine's drift) and its requests go to the arms. Without early stopping it always runs."""
        if self.min_tasks is None or self.aa_precision is None:
            return True
        if self.n_tasks(AA, wl) < self.min_tasks:
            return True
        pooled = self.aa_pooled()
        return pooled is None or rel_half_width(pooled) > self.aa_precision

    def shuffled(self, block: Block) -> list[str]:
        """The order of the block's servers: positions balanced, not only random.

        Measured here: the server that goes first in a block runs ~1-2% slower than its twin (A/A ratio 1.01-1.02
        with the baseline first, 0.99 with the twin first). A random order makes that noise, but over the few
        blocks of one workload it leaves a tight, biased A/A check. So each workload takes a random order of its
        servers and rotates it by one position per block: over k blocks every server holds every position once."""
        arms = sorted(block.arms)
        random.Random(f"{self.seed}:order:{block.workload}:{','.join(arms)}").shuffle(arms)
        if block.index not in self._turn_of:
            self._turn_of[block.index] = self._turns.get(block.workload, 0)
            self._turns[block.workload] = self._turn_of[block.index] + 1
        k = self._turn_of[block.index] % len(arms)
        return arms[k:] + arms[:k]
