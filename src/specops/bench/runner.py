"""Run the arms: a fresh llama-server per arm and repetition, arms interleaved over repetitions.

Every arm-repetition: start the server from the arm's profile (argv from :mod:`specops.argv`),
check that speculation is really on (``/slots``), send one warm-up request, then every task once
(streamed, greedy, fixed seed and max tokens, ``cache_prompt: false``), read the speculative counters
from ``/metrics`` before and after, sample the server's RSS, stop it, and save the record. Partial
records are written after every task, so a crash or Ctrl-C loses at most one request.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import psutil

from specops.argv import FlagError
from specops.bench.arms import Arm, interleaved_order
from specops.bench.request import RequestFailed, chat_body, stream_chat
from specops.bench.store import ResultStore
from specops.bench.tasks import Task
from specops.capabilities import Capabilities
from specops.client import (
    SPEC_ACCEPTED_PER_POS,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    ServerError,
    parse_metrics,
)
from specops.profile import ProfileError, ServerProfile
from specops.server import ServerProcess, ServerStartError

WARMUP_MESSAGES = [{"role": "user", "content": "Reply with one short sentence: what is a warm-up lap?"}]
WARMUP_TOKENS = 24


class BenchError(RuntimeError):
    """The bench cannot go on; the message says what happened and where partial results are."""


class ArmFailure(BenchError):
    pass


@dataclass
class BenchConfig:
    target: Path
    draft: Path | None
    server_binary: Path
    caps: Capabilities
    tasks: list[Task]
    max_tokens: int = 192
    seed: int = 42
    reps: int = 3
    threads: int | None = None
    draft_threads: int | None = None
    ctx_size: int = 4096
    derived_drafts: dict[str, Path] = field(default_factory=dict)
    speculative_binary: Path | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    start_timeout: float = 300.0
    max_busy: float | None = None
    idle_timeout: float = 1800.0
    machine: dict[str, Any] = field(default_factory=dict)

    def draft_for(self, arm: Arm) -> Path | None:
        if arm.draft is None:
            return None
        if arm.draft == "draft":
            if self.draft is None:
                raise BenchError(f"arm {arm.name} needs a draft model: pass --draft")
            return self.draft
        if arm.draft not in self.derived_drafts:
            raise BenchError(f"arm {arm.name} needs the {arm.draft} draft, which was not derived")
        return self.derived_drafts[arm.draft]

    def profile_for(self, arm: Arm) -> ServerProfile:
        data: dict[str, Any] = {
            "model": str(self.target),
            "ctx_size": self.ctx_size,
            "parallel": 1,
            "threads": self.threads,
            "metrics": True,
            "slots": True,
        }
        data.update(arm.profile)
        draft = self.draft_for(arm)
        if draft is not None:
            data["draft_model"] = str(draft)
            if self.draft_threads is not None:
                data["draft_threads"] = self.draft_threads
        try:
            return ServerProfile.from_dict(data)
        except ProfileError as exc:
            raise BenchError(f"arm {arm.name}: {exc}") from exc


class Progress:
    """Live progress on stderr: one line per request, with an ETA from the pace so far."""

    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.total = total
        self.done = 0
        self.measured = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr
        self.quiet = quiet

    def skip(self, n: int) -> None:
        self.done += n

    def note(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def eta(self) -> str:
        if not self.measured:
            return "?"
        left = (time.monotonic() - self.t0) / self.measured * (self.total - self.done)
        h, rem = divmod(int(left), 3600)
        return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"

    def request(self, arm: str, rep: int, i: int, n: int, task: str, summary: str) -> None:
        self.done += 1
        self.measured += 1
        self.note(f"  [{self.done}/{self.total}] rep {rep} {arm} {i}/{n} {task}: {summary} | ETA {self.eta()}")


class RssSampler:
    """Peak resident set size of a process, sampled in a background thread."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        try:
            rss = int(self.proc.memory_info().rss)
        except psutil.Error:
            return 0
        self.peak = max(self.peak, rss)
        return rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> RssSampler:
        self.samples.append(self.sample())
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join(2)
        last = self.sample()
        return {"after_load": self.samples[0] if self.samples else 0, "peak": self.peak, "last": last}


def spec_counters(text: str) -> dict[str, Any]:
    samples = parse_metrics(text)
    out: dict[str, Any] = {"draft_tokens": 0.0, "accepted": 0.0, "drafts": 0.0, "per_pos": {}}
    for s in samples:
        if s.name == SPEC_DRAFT_TOKENS:
            out["draft_tokens"] = s.value
        elif s.name == SPEC_ACCEPTED_TOKENS:
            out["accepted"] = s.value
        elif s.name == SPEC_DRAFTS:
            out["drafts"] = s.value
        elif s.name == SPEC_ACCEPTED_PER_POS and "position" in s.labels:
            out["per_pos"][s.labels["position"]] = s.value
    return out


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    per_pos = {k: v - before["per_pos"].get(k, 0.0) for k, v in after["per_pos"].items()}
    return {
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "drafts": after["drafts"] - before["drafts"],
        "per_pos": dict(sorted(per_pos.items(), key=lambda kv: int(kv[0]))),
    }


def _summary(req: dict[str, Any]) -> str:
    t = req.get("timings") or {}
    s = f"{req.get('n_predicted', 0)} tok, {req.get('decode_tps') or 0:.1f} tok/s"
    if t.get("draft_n"):
        s += f", acc {t.get('draft_n_accepted', 0)}/{t['draft_n']}"
    return s


def _exit_code(server: ServerProcess, grace: float = 3.0) -> int | None:
    """The server's exit code if it died (a dropped connection is often seen before the exit is)."""
    if server.proc is None:
        return None
    try:
        return server.proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        return None


def run_server_arm(arm: Arm, rep: int, cfg: BenchConfig, store: ResultStore, progress: Progress) -> dict[str, Any]:
    """Run every task once on a fresh llama-server for ``arm``; return (and save) the record."""
    profile = cfg.profile_for(arm)
    try:
        server = ServerProcess(cfg.server_binary, profile, cfg.caps, store.log_path(arm.name, rep), env=arm.env)
    except FlagError as exc:
        raise BenchError(f"arm {arm.name}: {exc}") from exc
    record: dict[str, Any] = {
        "arm": arm.name,
        "rep": rep,
        "arm_def": arm.to_dict(),
        "argv": server.argv,
        "env": arm.env,
        "started": time.time(),
        "requests": [],
    }

    def fail(msg: str) -> ArmFailure:
        record["error"] = msg
        record["status"] = "failed"
        path = store.save_partial(arm.name, rep, record)
        return ArmFailure(
            f"{msg}\npartial results of this arm-repetition kept in {path}; finished ones in "
            f"{store.root / 'arms'}; server log: {server.log_path}"
        )

    progress.note(f"rep {rep} arm {arm.name}: starting llama-server ({arm.description})")
    try:
        client = server.start(timeout=cfg.start_timeout)
    except ServerStartError as exc:
        raise fail(f"arm {arm.name} rep {rep}: llama-server did not start: {exc}") from exc
    sampler = RssSampler(server.pid or 0).start()
    try:
        slots = client.slots()
        record["slots_speculative"] = bool(slots and slots[0].get("speculative"))
        if arm.speculative and not record["slots_speculative"]:
            raise fail(f"arm {arm.name}: the server runs but /slots says speculation is off; argv: {server.argv}")
        http = httpx.Client(base_url=server.base_url, timeout=900.0)
        try:
            warm = stream_chat(http, chat_body(WARMUP_MESSAGES, WARMUP_TOKENS, cfg.seed))
            record["warmup"] = warm.to_dict()
            before = prev = spec_counters(client.metrics_text())
            for i, task in enumerate(cfg.tasks, 1):
                try:
                    res = stream_chat(http, chat_body(task.chat_messages(), cfg.max_tokens, cfg.seed))
                except RequestFailed as exc:
                    code = _exit_code(server)
                    state = f"llama-server exited with code {code}" if code is not None else "llama-server is up"
                    raise fail(
                        f"arm {arm.name} rep {rep}: request for task {task.id} failed ({exc}); {state}."
                        f"\nlast log lines:\n{server.log_tail(15)}"
                    ) from exc
                # counters only (never the *_seconds gauges): one scrape per request gives exact
                # per-request drafts and per-position acceptance
                cur = spec_counters(client.metrics_text())
                req = {
                    "task": task.id,
                    "workload": task.workload,
                    **res.to_dict(),
                    "spec": counter_delta(prev, cur),
                }
                prev = cur
                record["requests"].append(req)
                store.save_partial(arm.name, rep, record)
                progress.request(arm.name, rep, i, len(cfg.tasks), task.id, _summary(req))
            after = prev
        finally:
            http.close()
        record["spec"] = counter_delta(before, after)
    except (ServerError, RequestFailed, httpx.HTTPError) as exc:
        code = _exit_code(server)
        raise fail(f"arm {arm.name} rep {rep}: server stopped answering ({exc}); exit code {code}") from exc
    finally:
        record["rss"] = sampler.stop()
        server.stop()
    record["finished"] = time.time()
    record["machine"] = {**cfg.machine, "loadavg_after": os.getloadavg()}
    store.save(arm.name, rep, record)
    return record


Executor = Callable[[Arm, int, BenchConfig, ResultStore, Progress], dict[str, Any]]


def machine_busy(interval: float = 5.0) -> float:
    """Share of all CPUs busy (percent) over ``interval`` seconds: between arms, that is other work."""
    return float(psutil.cpu_percent(interval=interval))


def wait_for_quiet(cfg: BenchConfig, progress: Progress, probe: Callable[[], float] = machine_busy) -> dict[str, Any]:
    """Before an arm-repetition: with ``max_busy`` set, wait (up to ``idle_timeout``) until the machine
    is quieter than that. Returns what was seen, recorded with the arm-repetition."""
    busy = probe()
    waited = 0.0
    t0 = time.monotonic()
    while cfg.max_busy is not None and busy > cfg.max_busy and waited < cfg.idle_timeout:
        progress.note(f"  machine {busy:.0f}% busy with other work (> {cfg.max_busy:.0f}%): waiting")
        time.sleep(15)
        busy = probe()
        waited = time.monotonic() - t0
    return {"busy_percent_before": busy, "waited_s": round(waited, 1), "loadavg_before": os.getloadavg()}


def run_bench(
    cfg: BenchConfig, arms: list[Arm], store: ResultStore, executors: dict[str, Executor], progress: Progress
) -> None:
    """All repetitions of all arms, interleaved; finished arm-repetitions on disk are skipped."""
    for rep in range(cfg.reps):
        for arm in interleaved_order(arms, rep):
            if store.has(arm.name, rep):
                progress.skip(len(cfg.tasks))
                continue
            executor = executors.get(arm.kind)
            if executor is None:
                raise BenchError(f"no executor for arm kind {arm.kind!r} ({arm.name})")
            cfg.machine = (
                wait_for_quiet(cfg, progress) if cfg.max_busy is not None else {"loadavg_before": os.getloadavg()}
            )
            executor(arm, rep, cfg, store, progress)
