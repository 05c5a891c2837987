"""Saturation soak: N clients against llama-server with ``--parallel N``, speculative and plain side by side.

Design (fair on a 2-core machine): for each N both servers (same build, same target, same ``-np N``; one with
the draft and ``--spec-type``, one with ``--spec-type none``) are loaded and stay resident, but only one is under
load at a time, in alternating phases ordered ABBA (A B, B A, A B, ...). Loading both at once would put two
sets of compute threads on 2 cores: each arm would be measured against the other's contention, which differs
by arm (the draft's extra steps). Alternating gives each arm the whole machine, and the ABBA order makes a
linear drift of the machine hit both arms alike. Within a block both arms get the same tasks in the same
order (same seed), and a faulted block injects the same fault into both phases.

Each phase is an ordinary soak (:class:`specops.soak.runner.SoakRunner`): worker i pins ``id_slot = i`` so
every request's slot is known (per-slot throughput and acceptance come from the requests' own ``timings``:
``/slots`` has no per-slot draft counters at the pinned commit), requests are streamed (time to first token
measured at the client), every request is accounted for (lost = issued but never recorded), faults are
injected and recovered from (the supervisor plays ``Restart=always``). ``/slots`` is polled during each phase
as independent evidence that every slot was used and whether it speculated.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from specops.kinds import PLAIN
from specops.soak.accounting import FAILED
from specops.soak.backoff import Backoff
from specops.soak.config import FaultPlan, FaultSpec, SoakConfig, SoakConfigError, Thresholds
from specops.soak.runner import SoakResult, SoakRunner, new_run_id
from specops.soak.supervise import SupervisedPid, Supervisor

log = logging.getLogger(__name__)

SPEC = "speculative"  # the side under test; plain decoding's is the kinds table's one name for it (PLAIN)
ARMS = (SPEC, PLAIN)
# llama-server's own per-request line, per slot: "slot print_timing: id  0 | task 1 | draft acceptance = 1.00000
# (   11 accepted /    11 generated), mean len =  3.75"
_ACCEPT_RE = re.compile(r"slot print_timing: id\s+(\d+) \|.*draft acceptance = [0-9.]+ \(\s*(\d+) accepted /\s*(\d+) "
                        r"generated\)")


@dataclass(frozen=True)
class SaturationPlan:
    levels: tuple[int, ...] = (1, 2, 4)
    duration: float = 600.0  # seconds of load per level (both arms together)
    phase: float = 60.0  # seconds of load per arm and phase
    faults: tuple[FaultSpec, ...] = ()
    fault_every: int = 2  # every k-th block gets the next fault (in both of its phases)
    fault_at: float = 0.3  # fraction of the phase at which the fault is injected
    max_tokens: int = 128
    request_timeout: float = 300.0
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, max_delay=5.0, give_up_after=600.0))
    recovery_timeout: float = 300.0
    seed: int = 42
    task_files: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    slots_interval: float = 1.0
    # blocks that send the same tasks in the same order (one seed): 2 gives each arm two phases on the same
    # requests, with different batch partners, so plain decoding's own run-to-run difference at N is measured
    # beside the candidate's difference from it (the tune's identity at N, :mod:`specops.tune.streams`)
    blocks_per_order: int = 1

    def __post_init__(self) -> None:
        if not self.levels or any(not 1 <= n <= 64 for n in self.levels):
            raise SoakConfigError("levels: parallel slots within 1..64, at least one")
        if not 0 < self.phase <= self.duration:
            raise SoakConfigError("phase must be > 0 and at most the duration per level")
        if self.fault_every < 1 or not 0 <= self.fault_at < 1:
            raise SoakConfigError("fault_every >= 1 and fault_at within [0, 1)")
        if self.blocks_per_order < 1:
            raise SoakConfigError("blocks_per_order must be at least 1")
        if any(f.kind == "restart" for f in self.faults):
            raise SoakConfigError("restart needs a systemd unit: use kill9 or stop[:SECONDS] here")

    @property
    def blocks(self) -> int:
        """Blocks (one phase per arm) per level: at least one."""
        return max(1, round(self.duration / (2 * self.phase)))

    def block_order(self, block: int) -> tuple[str, str]:
        return (SPEC, PLAIN) if block % 2 == 0 else (PLAIN, SPEC)

    def block_seed(self, block: int) -> int:
        """The seed of ``block``'s task order: the same for each run of ``blocks_per_order`` blocks."""
        return self.seed + block // self.blocks_per_order

    def block_fault(self, block: int) -> FaultSpec | None:
        if not self.faults or (block + 1) % self.fault_every:
            return None
        return self.faults[((block + 1) // self.fault_every - 1) % len(self.faults)]


# ---- what is measured ------------------------------------------------------------------------------------


class SlotWatcher:
    """Polls ``/slots`` in a thread: which slot ids exist, were seen processing, and speculate."""

    def __init__(self, base_url: str, interval: float = 1.0, timeout: float = 5.0) -> None:
        self.url = base_url.rstrip("/") + "/slots"
        self.interval = interval
        self.timeout = timeout
        self.slots: dict[int, dict[str, Any]] = {}
        self.polls = 0
        self.errors = 0
        self.most_at_once = 0  # the most slots one poll saw processing together
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="slot-watcher", daemon=True)

    def poll_once(self, http: httpx.Client) -> None:
        try:
            data = http.get(self.url).json()
        except (httpx.HTTPError, ValueError):
            self.errors += 1
            return
        if not isinstance(data, list):
            self.errors += 1
            return
        self.polls += 1
        self.most_at_once = max(self.most_at_once, sum(1 for e in data if isinstance(e, dict)
                                                       and e.get("is_processing") is True))
        for entry in data:
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
                continue
            s = self.slots.setdefault(entry["id"], {"processing_seen": 0, "speculative": set(), "n_ctx": None})
            if entry.get("is_processing") is True:
                s["processing_seen"] += 1
            if isinstance(entry.get("speculative"), bool):
                s["speculative"].add(entry["speculative"])
            if isinstance(entry.get("n_ctx"), int):
                s["n_ctx"] = entry["n_ctx"]

    def _loop(self) -> None:
        with httpx.Client(timeout=self.timeout) as http:
            while not self._stop.is_set():
                self.poll_once(http)
                self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=self.timeout + self.interval + 5)
        return {"polls": self.polls, "errors": self.errors, "most_at_once": self.most_at_once,
                "slots": {str(k): {"processing_seen": v["processing_seen"], "speculative": sorted(v["speculative"]),
                                   "n_ctx": v["n_ctx"]} for k, v in sorted(self.slots.items())}}


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def summarize_arm(level: int, phases: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm at one level, from its phases (``phase_record`` dicts)."""
    wall = sum(p["duration_s"] for p in phases)
    records = [r for p in phases for r in p["requests"] if r["kind"] == "load"]
    ok = [r for r in records if r["outcome"] != FAILED]
    tokens = sum(r["predicted_n"] for r in ok)
    slots: dict[int, dict[str, Any]] = {}
    for s in range(level):
        mine = [r for r in ok if r["slot"] == s]
        drafted = sum(r["draft_n"] for r in mine)
        accepted = sum(r["draft_accepted"] for r in mine)
        pred_ms = sum(r["predicted_ms"] for r in mine)
        slot_tokens = sum(r["predicted_n"] for r in mine)
        slots[s] = {
            "requests": len(mine), "tokens": slot_tokens, "tokens_per_s": _ratio(slot_tokens, wall),
            "decode_tokens_per_s": _ratio(slot_tokens * 1000.0, pred_ms),
            "draft_tokens": drafted, "accepted_tokens": accepted, "acceptance": _ratio(accepted, drafted),
        }
    watched: dict[str, dict[str, Any]] = {}
    for p in phases:
        for sid, s in p["slots_seen"]["slots"].items():
            w = watched.setdefault(sid, {"processing_seen": 0, "speculative": set()})
            w["processing_seen"] += s["processing_seen"]
            w["speculative"].update(s["speculative"])
    most_at_once = max((int(p["slots_seen"].get("most_at_once", 0)) for p in phases), default=0)
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    total = [r["end"] - r["start"] for r in ok]
    rss = [p["rss_max"] for p in phases if p["rss_max"] is not None]
    anon = [p["anon_max"] for p in phases if p["anon_max"] is not None]
    drafted = sum(r["draft_n"] for r in ok)
    lost = sum(p["summary"]["lost"] for p in phases)
    return {
        "level": level, "phases": len(phases), "wall_s": wall, "requests": len(records), "ok": len(ok),
        "failed": len(records) - len(ok), "lost": lost,
        "retried": sum(p["summary"]["retried_then_succeeded"] for p in phases),
        "tokens": tokens, "tokens_per_s": _ratio(tokens, wall),
        "acceptance": _ratio(sum(r["draft_accepted"] for r in ok), drafted),
        "slots": slots,
        "slots_seen": {k: {"processing_seen": v["processing_seen"], "speculative": sorted(v["speculative"])}
                       for k, v in sorted(watched.items())},
        "slots_processing_at_once": most_at_once,
        "ttft_s": {f"p{int(q * 100)}": percentile(ttft, q) for q in (0.5, 0.95, 0.99)},
        "total_s": {f"p{int(q * 100)}": percentile(total, q) for q in (0.5, 0.95, 0.99)},
        "rss_max_bytes": max(rss) if rss else None, "anon_max_bytes": max(anon) if anon else None,
        "anon_per_slot_bytes": max(anon) / level if anon else None,
        "faults": [f for p in phases for f in p["faults"]],
    }


def block_ratios(level: int, phases: list[dict[str, Any]]) -> list[float]:
    """Speculative / plain tokens per second, per block (the paired comparison)."""
    out: list[float] = []
    for b in sorted({p["block"] for p in phases if p["level"] == level}):
        tps = {}
        for p in phases:
            if p["level"] == level and p["block"] == b:
                tok = sum(r["predicted_n"] for r in p["requests"] if r["kind"] == "load" and r["outcome"] != FAILED)
                tps[p["arm"]] = _ratio(tok, p["duration_s"])
        if tps.get(SPEC) is not None and tps.get(PLAIN):
            out.append(tps[SPEC] / tps[PLAIN])
    return out


def problems(arms: dict[str, dict[str, Any]], level: int) -> list[str]:
    """Why a level does not pass: lost or failed requests, unused slots, slots speculating in the wrong arm,
    faults without recovery."""
    out: list[str] = []
    for arm, a in arms.items():
        if a["lost"]:
            out.append(f"N={level} {arm}: {a['lost']} requests lost")
        if a["failed"]:
            out.append(f"N={level} {arm}: {a['failed']} requests failed after retries")
        unused = [s for s, v in a["slots"].items() if not v["requests"]]
        if unused:
            out.append(f"N={level} {arm}: slot(s) {unused} served no request")
        seen = {int(k) for k, v in a["slots_seen"].items() if v["processing_seen"]}
        if set(range(level)) - seen:
            out.append(f"N={level} {arm}: /slots never showed slot(s) {sorted(set(range(level)) - seen)} processing")
        want = arm == SPEC
        wrong = [k for k, v in a["slots_seen"].items() if v["speculative"] and v["speculative"] != [want]]
        if wrong:
            out.append(f"N={level} {arm}: /slots says slot(s) {wrong} speculative={not want}")
        for f in a["faults"]:
            if f["error"] or f["recovered_at"] is None:
                out.append(f"N={level} {arm}: fault {f['label']} at {f['t']:.0f}s: "
                           f"{f['error'] or 'no recovery'}")
    return out


def log_acceptance(paths: list[Path]) -> dict[int, dict[str, int]]:
    """llama-server's own per-slot acceptance, summed over its ``draft acceptance`` log lines (all processes of
    one arm and level): slot id -> accepted, drafted. Empty when nothing was drafted."""
    out: dict[int, dict[str, int]] = {}
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for slot, accepted, drafted in _ACCEPT_RE.findall(text):
            s = out.setdefault(int(slot), {"accepted": 0, "drafted": 0})
            s["accepted"] += int(accepted)
            s["drafted"] += int(drafted)
    return out


# ---- the run ---------------------------------------------------------------------------------------------


MakeServer = Callable[[str, int, int], Any]  # (arm, level, generation) -> ServerProcess (not started)


@dataclass
class SaturationResult:
    run_id: str
    started_at: str
    ended_at: str
    duration_s: float
    plan: dict[str, Any]
    setup: dict[str, Any]
    levels: list[dict[str, Any]]
    phases: list[dict[str, Any]]
    problems: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = "pass" if self.ok else "fail"
        return d


def phase_record(level: int, block: int, arm: str, offset: float, result: SoakResult,
                 slots_seen: dict[str, Any]) -> dict[str, Any]:
    anon = [s.anon_bytes for s in result.rss_samples if s.anon_bytes is not None]
    rss = [s.rss_bytes for s in result.rss_samples]
    return {
        "level": level, "block": block, "arm": arm, "start_s": round(offset, 2),
        "duration_s": result.duration_s, "summary": result.summary,
        "checks_failed": [f"{c.name}: {c.detail}" for c in result.failures],
        "faults": [f.to_dict() for f in result.faults],
        "rss_max": max(rss) if rss else None, "anon_max": max(anon) if anon else None,
        "pid_changes": result.pid_changes, "slots_seen": slots_seen,
        "requests": [{k: r[k] for k in ("kind", "outcome", "slot", "start", "end", "ttft", "predicted_n",
                                        "predicted_ms", "draft_n", "draft_accepted")} | {"attempts": len(r["attempts"])}
                     | {"task_id": rec.task_id, "digest": text_digest(rec.text)}
                     for rec in result.records for r in (rec.to_dict(),)],
    }


def text_digest(text: str | None) -> str | None:
    """A short digest of a request's answer, for comparing answers across phases without keeping them."""
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()[:16]


class SaturationRunner:
    def __init__(self, plan: SaturationPlan, make_server: MakeServer, *, run_id: str | None = None,
                 setup: dict[str, Any] | None = None,
                 kv_per_slot: Callable[[str], int | None] = lambda arm: None) -> None:
        self.plan = plan
        self.kv_per_slot = kv_per_slot  # arm -> bytes of KV cache one slot holds (computed from the GGUF shapes)
        self.make_server = make_server
        self.run_id = run_id or new_run_id()
        self.setup = setup or {}
        self._stop = threading.Event()
        self._runner: SoakRunner | None = None

    def request_stop(self) -> None:
        self._stop.set()
        if self._runner is not None:
            self._runner.request_stop()

    def _phase(self, sup: Supervisor, level: int, block: int, arm: str, t0: float) -> dict[str, Any]:
        p = self.plan
        fault = p.block_fault(block)
        faults = (FaultPlan((fault,), first=p.phase * p.fault_at, interval=p.phase, tail=0.0,
                            recovery_timeout=p.recovery_timeout, limit=1) if fault else FaultPlan())
        cfg = SoakConfig(
            url=sup.current.base_url, duration=p.phase, concurrency=level, pin_slots=True, stream=True,
            max_tokens=p.max_tokens, request_timeout=p.request_timeout, backoff=p.backoff, references=0,
            reference_interval=p.phase, task_files=p.task_files, workloads=p.workloads, seed=p.block_seed(block),
            sample_interval=min(5.0, p.phase / 4), bucket_seconds=p.phase, faults=faults,
            thresholds=Thresholds(min_tps_ratio=0.0), run_id=f"{self.run_id}-n{level}-b{block}-{arm}")
        watcher = SlotWatcher(sup.current.base_url, p.slots_interval)
        offset = time.monotonic() - t0
        log.info("N=%d block %d: %s for %.0fs%s", level, block, arm, p.phase,
                 f", fault {fault.label()}" if fault else "")
        self._runner = SoakRunner(cfg, pid_source=SupervisedPid(sup), expect_speculation=arm == SPEC)
        watcher.start()
        try:
            result = self._runner.run()
        finally:
            seen = watcher.stop()
            self._runner = None
        return phase_record(level, block, arm, offset, result, seen)

    def _warm(self, sup: Supervisor, level: int) -> None:
        """One short request per slot, so no arm's first measured request pays a cold start."""
        from specops.client import LlamaServerClient

        with LlamaServerClient(sup.current.base_url, timeout=self.plan.request_timeout) as client:
            for s in range(level):
                client.chat([{"role": "user", "content": "Say hello."}], max_tokens=4, id_slot=s,
                            cache_prompt=False, temperature=0.0)

    def run(self) -> SaturationResult:
        t0 = time.monotonic()
        started = time.time()
        phases: list[dict[str, Any]] = []
        levels: list[dict[str, Any]] = []
        all_problems: list[str] = []
        notes: list[str] = []
        for level in self.plan.levels:
            if self._stop.is_set():
                notes.append(f"stopped before N={level}")
                break
            sups: dict[str, Supervisor] = {}
            try:
                for arm in ARMS:
                    first = self.make_server(arm, level, 0)
                    first.start()
                    sups[arm] = Supervisor(first, lambda g, a=arm, n=level: self.make_server(a, n, g)).start()
                for arm in ARMS:
                    self._warm(sups[arm], level)
                mine: list[dict[str, Any]] = []
                for block in range(self.plan.blocks):
                    for arm in self.plan.block_order(block):
                        if self._stop.is_set():
                            break
                        mine.append(self._phase(sups[arm], level, block, arm, t0))
                restarts = {arm: sups[arm].restarts for arm in ARMS}
                start_errors = {arm: sups[arm].start_errors for arm in ARMS}
                logs = {arm: [s.log_path for s in (sups[arm].first, *sups[arm].spawned)] for arm in ARMS}
            finally:
                for s in sups.values():
                    s.stop()
            phases += mine
            arms = {arm: summarize_arm(level, [p for p in mine if p["arm"] == arm]) for arm in ARMS}
            for arm in ARMS:
                arms[arm]["kv_per_slot_bytes"] = self.kv_per_slot(arm)
                arms[arm]["server_acceptance"] = {
                    str(k): {**v, "acceptance": _ratio(v["accepted"], v["drafted"])}
                    for k, v in sorted(log_acceptance(logs[arm]).items())}
                arms[arm]["restarts"] = restarts[arm]
                arms[arm]["start_errors"] = start_errors[arm]
            ratios = block_ratios(level, mine)
            found = problems(arms, level)
            all_problems += found
            spec_tps, plain_tps = arms[SPEC]["tokens_per_s"], arms[PLAIN]["tokens_per_s"]
            levels.append({
                "level": level, "arms": arms, "block_ratios": ratios,
                "ratio": spec_tps / plain_tps if spec_tps is not None and plain_tps else None,
                "ratio_geomean": math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                if ratios and all(r > 0 for r in ratios) else None,
                "problems": found,
            })
            log.info("N=%d: speculative %s tok/s, plain %s tok/s", level, _fmt(spec_tps), _fmt(plain_tps))
        ended = time.time()
        if self._stop.is_set():
            notes.append("stopped on request before the end of the plan")
        return SaturationResult(
            run_id=self.run_id, started_at=_iso(started), ended_at=_iso(ended), duration_s=ended - started,
            plan=_plan_dict(self.plan), setup=self.setup, levels=levels, phases=phases, problems=all_problems,
            notes=notes)


def _fmt(v: float | None, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).isoformat(timespec="seconds")


def _plan_dict(plan: SaturationPlan) -> dict[str, Any]:
    d = asdict(plan)
    d["faults"] = [FaultSpec(**f).label() for f in d["faults"]]
    d["blocks"] = plan.blocks
    return d
