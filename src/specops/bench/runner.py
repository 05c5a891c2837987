"""Run the paired design: every arm's llama-server kept loaded side by side, requests alternating.

Servers start once per repetition (a fresh start gives every repetition empty n-gram pools and prompt
caches), each checked with ``/slots`` (speculation really on where the arm speculates) and warmed up
with one request. Then blocks run as :mod:`specops.bench.design` hands them out: one task on the
baseline, its A/A twin and every arm still running (greedy, fixed seed and max tokens, ``cache_prompt:
false``), time-sliced so that exactly one server computes at a time (:mod:`specops.bench.slicer`), or
one request after another in a shuffled order. After every request the server's speculative counters
are read from ``/metrics``.

Every finished block is appended to ``blocks.jsonl`` in the work directory, so an interrupted run
resumes where it stopped; a budget ends the run before a block that would not fit in it. The run's configuration is
:mod:`specops.bench.config`, its progress lines :mod:`specops.bench.progress`, a server's memory and counters
:mod:`specops.bench.meters`.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import httpx

from specops.argv import FlagError
from specops.bench import explain, weighted
from specops.bench.arms import Arm
from specops.bench.config import BenchConfig, BenchError
from specops.bench.design import AA, BASELINE, DIFFERS, NO_GAIN, SLOWER, Block, Design
from specops.bench.meters import RssSampler, counter_delta, spec_counters
from specops.bench.progress import Progress
from specops.bench.request import RequestFailed, RequestResult, chat_body, stream_chat
from specops.bench.slicer import run_sliced, sliced_rate
from specops.bench.store import ResultStore
from specops.bench.tasks import Task
from specops.client import ServerError
from specops.server import ServerProcess, ServerStartError

WARMUP_MESSAGES = [{"role": "user", "content": "Reply with one short sentence: what is a warm-up lap?"}]
WARMUP_TOKENS = 24


class Loaded:
    """One arm's llama-server, started and warmed up, kept until the arm is done."""

    def __init__(self, arm: Arm, cfg: BenchConfig, store: ResultStore, rep: int) -> None:
        self.arm = arm
        try:
            self.server = ServerProcess(cfg.server_binary, cfg.profile_for(arm), cfg.caps,
                                        store.log_path(arm.name, rep), env=arm.env)
        except FlagError as exc:
            raise BenchError(f"arm {arm.name}: {exc}") from exc
        client = self.server.start(timeout=cfg.start_timeout)
        self.client = client
        self.sampler = RssSampler(self.server.pid or 0).start()
        self.http = httpx.Client(base_url=self.server.base_url, timeout=900.0)
        slots = client.slots()
        self.speculative = bool(slots and slots[0].get("speculative"))
        if arm.speculative and not self.speculative:
            self.close()
            raise ServerStartError(f"/slots says speculation is off; argv: {self.server.argv}")
        self.warmup = stream_chat(self.http, chat_body(WARMUP_MESSAGES, WARMUP_TOKENS, cfg.seed)).to_dict()
        self.counters = spec_counters(client.metrics_text())

    def send(self, task: Task, cfg: BenchConfig) -> RequestResult:
        return stream_chat(self.http, chat_body(task.chat_messages(), cfg.max_tokens, cfg.seed))

    def counters_delta(self) -> dict[str, Any]:
        """The speculative counters moved since the last call (read from /metrics: counters only)."""
        cur = spec_counters(self.client.metrics_text())
        out = counter_delta(self.counters, cur)
        self.counters = cur
        return out

    def exit_code(self, grace: float = 3.0) -> int | None:
        proc = self.server.proc
        if proc is None:
            return None
        try:
            return proc.wait(timeout=grace)
        except Exception:
            return None

    def close(self) -> dict[str, int]:
        rss = self.sampler.stop()
        self.http.close()
        self.server.stop()
        return rss


class Pool:
    """The servers loaded side by side: the baselines always, arms as capacity allows."""

    def __init__(self, cfg: BenchConfig, arms: Mapping[str, Arm], store: ResultStore, progress: Progress) -> None:
        self.cfg = cfg
        self.arms = arms
        self.store = store
        self.progress = progress
        self.loaded: dict[str, Loaded] = {}
        self.rss: dict[str, dict[str, int]] = {}
        self.failed: dict[str, str] = {}

    def _start(self, name: str, rep: int) -> Loaded | None:
        arm = self.arms[name]
        if name in self.loaded:
            self.stop(name)
        self.progress.note(f"  loading {name}: {arm.description}")
        try:
            srv = Loaded(arm, self.cfg, self.store, rep)
        except (ServerStartError, ServerError, RequestFailed, httpx.HTTPError) as exc:
            if name in (BASELINE, AA):
                raise BenchError(f"the {name} server did not start: {exc}") from exc
            self.failed[name] = f"did not start: {str(exc).splitlines()[0]}"
            self.progress.note(f"  {name} failed to start; it is left out: {self.failed[name]}")
            return None
        self.store.append("servers.jsonl", {"rep": rep, "arm": name, "argv": srv.server.argv, "env": arm.env,
                                            "speculative": srv.speculative, "warmup": srv.warmup,
                                            "rss_after_load": srv.sampler.first})
        return srv

    def sync(self, wanted: list[str], rep: int, seed: int = 0) -> list[str]:
        """Keep the baselines and as many of ``wanted`` arms (in order) as capacity allows; servers that are
        missing start in a shuffled order (where a server lands in memory must not follow its role)."""
        for name in list(self.loaded):
            if name not in (BASELINE, AA) and name not in wanted:
                self.stop(name)
        cap = self.cfg.capacity or len(self.arms)
        keep = [BASELINE, AA]
        for name in wanted:
            if len(keep) >= cap:
                break
            if name not in self.failed:
                keep.append(name)
        todo = [n for n in keep if n not in self.loaded]
        random.Random(f"load:{seed}").shuffle(todo)
        for name in todo:
            srv = self._start(name, rep)
            if srv is not None:
                self.loaded[name] = srv
        return [n for n in self.loaded if n not in (BASELINE, AA)]

    def stop(self, name: str) -> None:
        srv = self.loaded.pop(name, None)
        if srv is not None:
            rss = srv.close()
            prev = self.rss.get(name, {})
            self.rss[name] = {k: max(v, prev.get(k, 0)) for k, v in rss.items()}

    def stop_all(self) -> None:
        for name in list(self.loaded):
            self.stop(name)


SPREAD_FILE = "spread.json"


class Explainer:
    """A block's answers that differ from plain decoding's, explained on the block's plain server (issue 78,
    :mod:`specops.bench.explain`) before the design judges identity: the host's batch spread is measured once per
    run, at the first difference (on that task's plain answer and the two plain answers before it), and kept in
    ``spread.json``; a resumed run reads it back."""

    def __init__(self, store: ResultStore, references: Mapping[str, str]) -> None:
        self.store = store
        self.references = references
        self.recent: list[tuple[list[dict[str, str]], str]] = []  # the last plain answers (messages, text)
        saved = store.load_json(SPREAD_FILE)
        self.spread = explain.Spread.from_dict(saved) if saved and saved.get("nats") is not None else None
        self.tried = saved is not None

    def _spread(self, scorer: explain.Scorer) -> explain.Spread | None:
        if not self.tried:
            self.tried = True
            try:
                self.spread = explain.batch_spread(scorer, self.recent[-3:][::-1])
                self.store.save_json(SPREAD_FILE, self.spread.to_dict())
            except explain.ExplainError as exc:
                self.store.save_json(SPREAD_FILE, {"nats": None, "why": str(exc)})
        return self.spread

    def block(self, pool: Pool, task: Task, results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """``{arm: explained difference}`` for the arms whose answer differs from plain decoding's in this block."""
        plain = results.get(BASELINE) or {}
        if "error" in plain or BASELINE not in pool.loaded or not isinstance(plain.get("text"), str):
            return {}
        self.recent = [*self.recent[-2:], (task.chat_messages(), plain["text"])]
        out: dict[str, dict[str, Any]] = {}
        for name, res in results.items():
            if name in (BASELINE, AA) or "error" in res or self.references.get(name, BASELINE) != BASELINE:
                continue
            if res.get("text") is None or res["text"] == plain["text"]:
                continue
            scorer = explain.Scorer(pool.loaded[BASELINE].client)
            spread = self._spread(scorer)
            out[name] = explain.explain(scorer, task.id, task.chat_messages(), plain["text"], res["text"],
                                        spread).to_dict()
        return out


def _failed(pool: Pool, name: str, task: Task, exc: BaseException) -> dict[str, Any]:
    srv = pool.loaded[name]
    code = srv.exit_code()
    state = f"llama-server exited with code {code}" if code is not None else "llama-server is still up"
    msg = f"request for {task.id} failed ({exc}); {state}"
    if name in (BASELINE, AA):
        raise BenchError(f"{name}: {msg}\nlast log lines:\n{srv.server.log_tail(15)}") from exc
    return {"error": msg, "log_tail": srv.server.log_tail(15)}


def run_block(pool: Pool, order: list[str], task: Task, cfg: BenchConfig, seed: int) -> dict[str, dict[str, Any]]:
    """One task on every server of the block: time-sliced (all at once, one computing at a time) or one
    request after another (``cfg.interleave == "requests"``). Returns each server's answer with its rate."""
    results: dict[str, dict[str, Any]] = {}
    if cfg.interleave == "requests":
        for name in order:
            try:
                res = pool.loaded[name].send(task, cfg)
            except (RequestFailed, ServerError, httpx.HTTPError) as exc:
                results[name] = _failed(pool, name, task, exc)
                continue
            results[name] = {**res.to_dict(), "spec": pool.loaded[name].counters_delta()}
        return results
    jobs = {n: functools.partial(pool.loaded[n].send, task, cfg) for n in order}
    pgids = {n: pool.loaded[n].server.pid or 0 for n in order}
    run = run_sliced(jobs, pgids, cfg.slice_s, seed=seed)
    for name in order:
        res = run.results.get(name)
        if not isinstance(res, RequestResult):
            results[name] = _failed(pool, name, task, res if isinstance(res, BaseException) else
                                    RuntimeError("no answer"))
            continue
        ivs = run.intervals[name]
        rec = res.to_dict()
        rec["server_decode_tps"] = rec.pop("decode_tps")  # includes the time it was paused: not a rate here
        rec["decode_tps"] = sliced_rate(res.n_predicted, res.first_token_at, res.last_token_at, ivs)
        rec["running_s"] = round(sum(e - s for s, e in ivs), 3)
        rec["slices"] = len(ivs)
        results[name] = {**rec, "spec": pool.loaded[name].counters_delta()}
    return results


IDENTITY_FILE = "identity.jsonl"


def top_up(cfg: BenchConfig, design: Design, pool: Pool, store: ResultStore, explainer: Explainer,
           elapsed: Callable[[], float], per_request: list[float], progress: Progress) -> int:
    """Identity on more answers than the speed measurement needed (issue 78 item 4), while the budget lasts: each
    arm the rule still admits answers the tasks it was not measured on, one request after another beside plain
    decoding (identity needs one answer from each side, not time-sliced blocks), each difference explained; an arm
    stops at its first difference the rule does not allow. The answers go to ``identity.jsonl`` (never into the speed
    figures). Only a run with a budget tops up, within it (the tune always; a bench without one ends with its design).
    Returns how many answers were added."""
    # at most half of what the budget has left: what follows the measurement (the figures at N streams, the report)
    # keeps its reserve and the slack a run that ended early used to leave it
    deadline = elapsed() + (cfg.budget_s - elapsed()) / 2 if cfg.budget_s is not None else None
    asked = {(r["arm"], r["task"]) for r in store.read(IDENTITY_FILE)}
    for rec in store.read("blocks.jsonl"):
        for arm in rec.get("arms") or ():
            asked.add((arm, rec.get("task")))
    added = 0
    each = sum(per_request) / len(per_request) if per_request else cfg.request_guess_s or 0.0
    for arm in design.arms:
        if arm in pool.failed or any(st.stopped in (DIFFERS, SLOWER, NO_GAIN) for st in design.status[arm].values()):
            continue  # out already, or cannot be chosen
        todo = [t for t in cfg.tasks if (arm, t.id) not in asked and t.workload in design.tasks]
        before = added
        for task in todo:
            if deadline is not None and elapsed() + 3 * each > deadline:
                return added
            pool.sync([arm], 0)
            if arm not in pool.loaded:
                break
            results = run_block(pool, [BASELINE, arm], task, replace(cfg, interleave="requests"), seed=0)
            if any("error" in r for r in results.values()):
                break
            for name, diff in explainer.block(pool, task, results).items():
                results[name]["difference"] = diff
            store.append(IDENTITY_FILE, {"arm": arm, "task": task.id, "workload": task.workload,
                                         "results": {n: {"text": r.get("text"), **({"difference": r["difference"]}
                                                                                      if "difference" in r else {})}
                                                     for n, r in results.items()}})
            added += 1
            diff = results[arm].get("difference")
            if diff and not (design.allow_near_ties and diff.get("verdict") == explain.NEAR_TIE):
                progress.note(f"  identity: {arm} differs from plain decoding on {task.id}: out under the rule")
                break
        if added > before:
            progress.note(f"  identity: {arm} checked on {added - before} more answer(s) beside plain decoding")
    return added


def near_ties(results: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The arms of a block whose difference from plain decoding was explained as a near-tie."""
    return {a for a, r in results.items() if (r.get("difference") or {}).get("verdict") == explain.NEAR_TIE}


def replay(design: Design, store: ResultStore) -> tuple[int, float]:
    """Feed the blocks of an interrupted run back into the design; returns (repetition, seconds used)."""
    rep, used = 0, 0.0
    for rec in store.read("blocks.jsonl"):
        if rec.get("type") == "fail":
            design.fail(rec["arm"], rec["why"])
            continue
        b = Block(rec["index"], rec["rep"], rec["workload"], rec["task"], tuple(rec["arms"]))
        design.add(b, {a: r.get("decode_tps") for a, r in rec["results"].items()},
                   {a: r.get("text") for a, r in rec["results"].items() if "error" not in r},
                   weighted.request_seconds(rec["results"].get(BASELINE)), near_ties(rec["results"]))
        rep = max(rep, b.rep)
        used = max(used, float(rec.get("elapsed_s", 0.0)))
    return rep, used


def record_block(design: Design, pool: Pool, store: ResultStore, progress: Progress, block: Block,
                 results: dict[str, dict[str, Any]], elapsed: float) -> dict[str, float | None]:
    """A finished block into the design and blocks.jsonl (a server that failed is left out and stopped); returns
    each server's decode rate."""
    for name, res in results.items():
        if "error" in res:
            design.fail(name, res["error"])
            store.append("blocks.jsonl", {"type": "fail", "arm": name, "why": res["error"]})
            pool.stop(name)
            progress.note(f"  {name} failed and is left out: {res['error']}")
    tps = {a: (r.get("decode_tps") if "error" not in r else None) for a, r in results.items()}
    design.add(block, tps, {a: r.get("text") for a, r in results.items() if "error" not in r},
               weighted.request_seconds(results.get(BASELINE)), near_ties(results))
    store.append("blocks.jsonl", {
        "index": block.index, "rep": block.rep, "workload": block.workload, "task": block.task,
        "arms": list(block.arms), "order": list(results), "elapsed_s": round(elapsed, 2),
        **({"plan": design.why[block.index]} if block.index in design.why else {}),
        "loadavg": os.getloadavg()[0], "results": results,
    })
    return tps


def run(cfg: BenchConfig, arms: Mapping[str, Arm], design: Design, store: ResultStore, progress: Progress,
        clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Run (or resume) the design to its end or the budget; returns what happened."""
    start_rep, used = replay(design, store)
    t0 = clock() - used
    pool = Pool(cfg, arms, store, progress)
    per_request: list[float] = []
    # differences explained where the rule judges identity (not under 'fastest', nor with imposed acceptance)
    explainer = Explainer(store, design.reference_of) if design.identity_stop and not cfg.synth_rates else None
    ended = "done"
    recycled = -1
    try:
        for rep in range(start_rep, design.reps):
            while True:
                wanted = [a for a in design.running() if design.needs(a, rep)]
                if cfg.recycle and design.blocks and design.blocks % cfg.recycle == 0 and recycled != design.blocks:
                    # every server's speed differs by ~1% from its twin's for as long as it lives (where it
                    # landed in memory): reloading them all in a new order turns that into noise, not bias
                    recycled = design.blocks
                    progress.note(f"  reloading the servers (every {cfg.recycle} blocks)")
                    pool.stop_all()
                loaded = pool.sync(wanted, rep, seed=design.blocks)
                for name, why in pool.failed.items():
                    if name in design.running():
                        design.fail(name, why)
                        store.append("blocks.jsonl", {"type": "fail", "arm": name, "why": why})
                block = design.next_block(rep, loaded)
                if block is None:
                    if any(a not in loaded and a not in pool.failed for a in wanted):
                        # arms waiting for room: the loaded ones are done with this repetition
                        for name in loaded:
                            if not design.needs(name, rep):
                                pool.stop(name)
                        if any(not design.needs(a, rep) for a in loaded):
                            continue
                    break
                elapsed = clock() - t0
                if cfg.budget_s is not None:
                    each = sum(per_request) / len(per_request) if per_request else cfg.request_guess_s or 0.0
                    guess = each * len(block.arms)
                    if elapsed + guess > cfg.budget_s:
                        design.out_of_budget()
                        ended = "budget"
                        break
                task = cfg.task(block.task)
                t_block = clock()
                results = run_block(pool, design.shuffled(block), task, cfg, seed=block.index)
                per_request.append((clock() - t_block) / len(block.arms))
                if explainer is not None:
                    for name, diff in explainer.block(pool, task, results).items():
                        results[name]["difference"] = diff
                tps = record_block(design, pool, store, progress, block, results, clock() - t0)
                progress.block(design, block, tps, clock() - t0, cfg.budget_s, len(cfg.tasks))
            if ended == "budget":
                break
            design.finish_rep(rep)
            pool.stop_all()
        if ended == "done" and explainer is not None and cfg.budget_s is not None:
            top_up(cfg, design, pool, store, explainer, lambda: clock() - t0, per_request, progress)
    except KeyboardInterrupt:
        ended = "interrupted"
        raise
    finally:
        pool.stop_all()
        store.save_json("rss.json", {**(store.load_json("rss.json") or {}), **pool.rss})
        store.save_json("outcome.json", outcome(design, ended, clock() - t0))
    return {"ended": ended, "elapsed_s": clock() - t0}


def outcome(design: Design, ended: str, elapsed_s: float) -> dict[str, Any]:
    """What outcome.json records of a run: how it ended, each arm's stop per workload and, with shares, where the
    blocks went and which held-back arms were measured and why."""
    return {"ended": ended, "elapsed_s": round(elapsed_s, 1), "blocks": design.blocks,
            **({"allocation": design.allocation(), "unshared": design.unshared, "activated": design.activated}
               if design.shares is not None else {}),
            "status": {a: {w: st.stopped for w, st in rows.items()} for a, rows in design.status.items()}}
