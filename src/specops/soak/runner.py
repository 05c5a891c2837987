"""The soak loop: references first, then N workers over the task mix until the bound, faults on the side,
the sampler in the background; afterwards the checks."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from specops.bench.tasks import Task, task_set_digest
from specops.client import LlamaServerClient
from specops.exporter.process import PidSource, prompt_cache_bound_mib
from specops.soak import invariants, timeline, trend, workload
from specops.soak.accounting import Attempt, Ledger, RequestRecord
from specops.soak.config import SoakConfig
from specops.soak.faults import Actions, FaultEvent, Injector, MissedFault, recovery_time
from specops.soak.reference import ReferenceSet
from specops.soak.requester import execute
from specops.soak.sampler import Sampler

log = logging.getLogger(__name__)

Send = Callable[[Task], Any]
ClientFactory = Callable[[int], Send]  # worker index (-1: the client that records the references) -> send


def default_client_factory(config: SoakConfig) -> ClientFactory:
    def factory(index: int) -> Send:
        client = LlamaServerClient(config.url, timeout=config.request_timeout, api_key=config.api_key)
        params = dict(workload.REQUEST_PARAMS)
        if config.pin_slots and index >= 0:
            params["id_slot"] = index
        chat = client.chat_stream if config.stream else client.chat

        def send(task: Task) -> Any:
            return chat(task.chat_messages(), max_tokens=config.max_tokens, **params)

        send.close = client.close  # type: ignore[attr-defined]
        return send

    return factory


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


@dataclass
class SoakResult:
    run_id: str
    config: dict[str, Any]
    started_at: str
    ended_at: str
    started_unix: float
    ended_unix: float
    duration_s: float
    hostname: str
    task_set: dict[str, Any]
    summary: dict[str, Any]
    checks: list[invariants.Check]
    faults: list[FaultEvent]
    buckets: list[timeline.Bucket]
    rss_trend: dict[str, Any]
    rss_samples: list[trend.RssSample]
    anon_trend: dict[str, Any]
    pid_changes: list[dict[str, Any]]
    nrestarts: list[tuple[float, int]]
    exporter: list[dict[str, Any]] | None
    sampler_errors: list[tuple[float, str]]
    references: dict[str, Any]
    records: list[RequestRecord]
    alerts: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    missed_faults: list[MissedFault] = field(default_factory=list)  # promised (--fault-count) but not run

    @property
    def failures(self) -> list[invariants.Check]:
        return [c for c in self.checks if c.status == invariants.FAIL]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "verdict": "pass" if self.ok else "fail",
            "failures": [f"{c.name}: {c.detail}" for c in self.failures],
            "config": self.config, "started_at": self.started_at, "ended_at": self.ended_at,
            "started_unix": self.started_unix, "ended_unix": self.ended_unix,
            "duration_s": round(self.duration_s, 2), "bucket_s": self.config["bucket_seconds"],
            "hostname": self.hostname, "task_set": self.task_set,
            "summary": self.summary, "checks": [c.to_dict() for c in self.checks],
            "faults": [f.to_dict() for f in self.faults],
            "faults_missed": [m.to_dict() for m in self.missed_faults],
            "minutes": [b.to_dict() for b in self.buckets],
            "rss_trend": self.rss_trend, "anon_trend": self.anon_trend,
            "rss_samples": [[round(s.t, 2), s.pid, s.rss_bytes, s.anon_bytes] for s in self.rss_samples],
            "pid_changes": self.pid_changes, "nrestarts": self.nrestarts, "exporter": self.exporter,
            "sampler_errors": self.sampler_errors[:100], "references": self.references,
            "alerts": self.alerts, "notes": self.notes,
            "requests": [r.to_dict() for r in self.records],
        }


class SoakRunner:
    def __init__(self, config: SoakConfig, *, pid_source: PidSource | None = None,
                 actions: Actions | None = None, client_factory: ClientFactory | None = None,
                 expect_speculation: bool = False) -> None:
        self.config = config
        self.pid_source = pid_source
        self.actions = actions or Actions(unit=config.unit)
        self.client_factory = client_factory or default_client_factory(config)
        self.expect_speculation = expect_speculation
        self.stop_event = threading.Event()
        self.ledger = Ledger()
        self.refs = ReferenceSet()
        self._t0 = time.monotonic()
        self._ok_lock = threading.Lock()
        self._ok_attempts: list[Attempt] = []
        self._slots_lock = threading.Lock()
        self._slots_taken = 0
        self._stopped_early = False
        self._stopped_at = 0.0
        self._injector: Injector | None = None
        self._extra = 0

    def request_stop(self) -> None:
        """Stop issuing (e.g. on SIGTERM): in-flight requests stop retrying and are recorded as such."""
        self._stopped_at = self.clock()
        self._stopped_early = True
        self.stop_event.set()

    # ---- time -------------------------------------------------------------------------------
    def clock(self) -> float:
        return time.monotonic() - self._t0

    # ---- pieces -----------------------------------------------------------------------------
    def _note_ok(self, rec: RequestRecord) -> None:
        with self._ok_lock:
            self._ok_attempts.extend(a for a in rec.attempts if a.ok)

    def _recovered(self, event: FaultEvent) -> float | None:
        with self._ok_lock:
            attempts = list(self._ok_attempts)
        return recovery_time(event, attempts)

    def _take_slot(self) -> bool:
        """One more request may be issued: within the duration and the count, and not stopped. At the bound,
        a fault in progress or not yet recovered keeps the load going (bounded by the recovery timeout), so
        every fault's recovery is observed, and so does a promised fault (--fault-count) that has not run yet
        (bounded by the injector's late_deadline); once the load has ended no fault is injected any more."""
        if self.stop_event.is_set():
            return False
        within = self.config.duration is None or self.clock() < self.config.duration
        with self._slots_lock:
            if within and (self.config.max_requests is None or self._slots_taken < self.config.max_requests):
                self._slots_taken += 1
                return True
        injector = self._injector
        if injector is None:
            return False
        with injector.gate.lock:
            if not injector.gate.load_done and injector.pending(self.clock()):
                with self._slots_lock:
                    self._extra += 1
                return True
            injector.gate.end_load(self.clock())
        return False

    def _one(self, send: Send, kind: str, task: Task, rng: random.Random, sampler: Sampler,
             slot: int | None = None) -> RequestRecord:
        rec = self.ledger.issue(kind, task.id)
        rec.slot = slot
        try:
            execute(rec, lambda: send(task), self.config.backoff, self.clock, rng=rng,
                    pid_of=sampler.current_pid, abort=self.stop_event.is_set,
                    sleep=lambda s: self.stop_event.wait(s) and None)
            if rec.outcome != "failed" and rec.text is not None:
                if kind == "reference-record":
                    self.refs.record(task.id, rec.text)
                elif kind == "reference":
                    drift = self.refs.check(task.id, rec.text, rec.end, rec.seq)
                    if drift is not None:
                        rec.drift_position = drift.position
                        log.warning("reference %s drifted at char %d", task.id, drift.position)
        except Exception as exc:  # never lose a request to a bug: record it as failed, with the reason
            log.exception("request %d", rec.seq)
            rec.outcome = "failed"
            rec.reason = f"internal: {type(exc).__name__}: {exc}"
        self.ledger.record(rec)
        if rec.outcome != "failed":
            self._note_ok(rec)
        return rec

    def _worker(self, index: int, mixer: workload.Mixer, sampler: Sampler) -> None:
        send = self.client_factory(index)
        rng = random.Random(self.config.seed * 1000 + index)
        slot = index if self.config.pin_slots else None
        try:
            while self._take_slot():
                job = mixer.next(self.clock())
                self._one(send, job.kind, job.task, rng, sampler, slot)
        finally:
            close = getattr(send, "close", None)
            if close:
                close()

    # ---- the run ----------------------------------------------------------------------------
    def run(self) -> SoakResult:
        cfg = self.config
        run_id = cfg.run_id or new_run_id()
        tasks = workload.load(cfg.task_files, cfg.workloads)
        ref_tasks = workload.pick_references(tasks, cfg.references)
        self._t0 = time.monotonic()
        started_unix = time.time()
        sampler = Sampler(self.pid_source, self.clock, cfg.sample_interval, cfg.exporter_url)
        sampler.sample_once()
        sampler.start()
        injector = Injector(cfg.faults, cfg.bound_seconds, self.clock,
                            lambda: sampler.current_pid(refresh=True), self._recovered, self.actions)
        log.info("soak %s: %s, %d workers, %d tasks, %d references", run_id, cfg.url, cfg.concurrency,
                 len(tasks), len(ref_tasks))
        workers: list[threading.Thread] = []
        notes: list[str] = []
        interrupted: float | None = None
        try:
            send = self.client_factory(-1)
            try:
                rng = random.Random(cfg.seed)
                for task in ref_tasks:
                    if self.stop_event.is_set():
                        break
                    self._one(send, "reference-record", task, rng, sampler)
            finally:
                close = getattr(send, "close", None)
                if close:
                    close()
            mixer = workload.Mixer(tasks, [t for t in ref_tasks if t.id in self.refs.ids()],
                                   cfg.reference_interval, cfg.seed)
            self._injector = injector
            injector.start(offset=self.clock())
            log.info("load starts at %.1fs; faults at %s", self.clock(),
                     ", ".join(f"{t:.0f}s {f.label()}" for t, f in injector.schedule) or "none")
            workers = [threading.Thread(target=self._worker, args=(i, mixer, sampler), name=f"soak-worker-{i}",
                                        daemon=True) for i in range(cfg.concurrency)]
            for w in workers:
                w.start()
            for w in workers:
                while w.is_alive():
                    w.join(timeout=0.5)
        except KeyboardInterrupt:
            interrupted = self.clock()
            notes.append(f"interrupted at {interrupted:.1f}s: stopped issuing, in-flight requests finished")
            log.warning("interrupted: finishing in-flight requests")
        finally:
            self.stop_event.set()
            for w in workers:  # in-flight requests stop retrying and are recorded
                w.join(timeout=cfg.request_timeout + 30)
            if interrupted is not None:
                injector.stop(f"the soak was interrupted at {interrupted:.1f}s")
            elif self._stopped_early:
                injector.stop(f"the soak was stopped on request (SIGTERM) at {self._stopped_at:.1f}s")
            else:
                injector.stop()
            sampler.stop()
        ended_unix = time.time()
        result = self._result(run_id, tasks, ref_tasks, injector, sampler, started_unix, ended_unix)
        result.notes.extend(notes)
        if self._extra:
            result.notes.append(f"{self._extra} request(s) sent after the bound to see the last fault recover "
                                "or a late promised fault run")
        if self._stopped_early:
            result.notes.append("stopped on request (SIGTERM) before the bound")
        return result

    def _result(self, run_id: str, tasks: list[Task], ref_tasks: list[Task], injector: Injector,
                sampler: Sampler, started_unix: float, ended_unix: float) -> SoakResult:
        cfg = self.config
        records = self.ledger.records()
        attempts = [a for r in records for a in r.attempts]
        faults = injector.snapshot()
        missed = injector.missed()
        for f in faults:
            f.recovered_at = recovery_time(f, attempts)
        duration = ended_unix - started_unix
        buckets = timeline.build(records, duration, [f.t for f in faults], cfg.bucket_seconds)
        rss_trend = trend.summarize(sampler.rss, cfg.thresholds.rss_warmup)
        anon_trend = trend.summarize(sampler.rss, cfg.thresholds.rss_warmup, attr="anon_bytes")
        had_pid = self.pid_source is not None
        th = cfg.thresholds
        rss_th = th if th.rss_allowance_mb is not None else dataclasses.replace(
            th, rss_allowance_mb=prompt_cache_bound_mib(sampler.cmdline) if sampler.cmdline else 0.0)
        checks = [
            invariants.check_accounting(self.ledger.issued, self.ledger.lost()),
            invariants.check_failed(records, th),
            invariants.check_unexplained_errors(records, faults, th),
            invariants.check_fault_count(injector.promised, faults, missed),
            invariants.check_faults(faults),
            invariants.check_references(len(ref_tasks), len(self.refs.ids()), self.refs.drifts,
                                        self.refs.checks, th),
            invariants.check_throughput(buckets, th),
            invariants.check_acceptance(buckets, th, self.expect_speculation),
            invariants.check_rss(anon_trend if anon_trend["judged"] else rss_trend, had_pid, rss_th),
            invariants.check_restarts(sampler.pid_changes, sampler.nrestarts, faults, had_pid),
            invariants.check_exporter(sampler.exporter if cfg.exporter_url else None, th),
        ]
        texts = self.refs.texts()
        return SoakResult(
            run_id=run_id, config=config_dict(cfg), started_at=_iso(started_unix), ended_at=_iso(ended_unix),
            started_unix=started_unix, ended_unix=ended_unix, duration_s=duration,
            hostname=socket.gethostname(),
            task_set={"tasks": len(tasks), "digest": task_set_digest(tasks),
                      "workloads": sorted({t.workload for t in tasks})},
            summary=self.ledger.summary(), checks=checks, faults=faults, buckets=buckets, rss_trend=rss_trend,
            anon_trend=anon_trend, rss_samples=list(sampler.rss), pid_changes=[asdict(c) for c in sampler.pid_changes],
            nrestarts=list(sampler.nrestarts),
            exporter=[s.to_dict() for s in sampler.exporter] if cfg.exporter_url else None,
            sampler_errors=list(sampler.errors),
            references={"ids": [t.id for t in ref_tasks], "texts": texts, "checks": self.refs.checks,
                        "drifts": [d.to_dict() for d in self.refs.drifts]},
            records=records, missed_faults=missed,
        )


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).isoformat(timespec="seconds")


def config_dict(cfg: SoakConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d.pop("api_key", None)
    d["faults"]["faults"] = [f["kind"] if f["kind"] != "stop" else f"stop:{f['pause']:g}"
                             for f in d["faults"]["faults"]]
    return d
