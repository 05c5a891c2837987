"""Request accounting: every issued request ends as succeeded, retried-then-succeeded or failed (with a
reason). The ledger knows what was issued, so a request that never came back shows up as *lost*."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

SUCCEEDED = "succeeded"
RETRIED = "retried_then_succeeded"
FAILED = "failed"
OUTCOMES = (SUCCEEDED, RETRIED, FAILED)


@dataclass
class Attempt:
    """One HTTP attempt. Times are seconds since the start of the soak."""

    start: float
    end: float
    ok: bool
    error_kind: str | None = None
    error: str | None = None
    pid: int | None = None  # server PID known to the sampler when the attempt ended

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RequestRecord:
    seq: int
    kind: str  # "load" | "reference" | "reference-record"
    task_id: str
    attempts: list[Attempt] = field(default_factory=list)
    outcome: str | None = None
    reason: str | None = None  # why it failed (last error), or None
    text: str | None = None
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_accepted: int = 0
    drift_position: int | None = None  # reference checks: first diverging char, None when identical
    slot: int | None = None  # the server slot the request was pinned to (id_slot), when pinned
    ttft: float | None = None  # seconds from issue to the first content token (streamed requests; retries included)

    @property
    def start(self) -> float:
        return self.attempts[0].start if self.attempts else 0.0

    @property
    def end(self) -> float:
        return self.attempts[-1].end if self.attempts else 0.0

    def finish(self) -> None:
        """Set the outcome from the attempts."""
        if self.attempts and self.attempts[-1].ok:
            self.outcome = SUCCEEDED if len(self.attempts) == 1 else RETRIED
            self.reason = None
        else:
            self.outcome = FAILED
            if self.reason is None:
                last = self.attempts[-1] if self.attempts else None
                self.reason = f"{last.error_kind}: {last.error}" if last else "no attempt was made"

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        d = {
            "seq": self.seq, "kind": self.kind, "task_id": self.task_id, "outcome": self.outcome,
            "reason": self.reason, "start": round(self.start, 3), "end": round(self.end, 3),
            "attempts": [a.to_dict() for a in self.attempts], "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms, "draft_n": self.draft_n, "draft_accepted": self.draft_accepted,
            "drift_position": self.drift_position, "slot": self.slot,
            "ttft": None if self.ttft is None else round(self.ttft, 4),
        }
        if with_text:
            d["text"] = self.text
        return d


class Ledger:
    """Thread-safe: ``issue()`` hands out a sequence number, ``record()`` files the finished request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        self._issued: dict[int, tuple[str, str]] = {}
        self._records: dict[int, RequestRecord] = {}

    def issue(self, kind: str, task_id: str) -> RequestRecord:
        with self._lock:
            seq = self._next
            self._next += 1
            self._issued[seq] = (kind, task_id)
        return RequestRecord(seq=seq, kind=kind, task_id=task_id)

    def record(self, rec: RequestRecord) -> None:
        if rec.outcome is None:
            rec.finish()
        with self._lock:
            if rec.seq not in self._issued:
                raise ValueError(f"request {rec.seq} was never issued")
            if rec.seq in self._records:
                raise ValueError(f"request {rec.seq} recorded twice")
            self._records[rec.seq] = rec

    @property
    def issued(self) -> int:
        with self._lock:
            return len(self._issued)

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return [self._records[k] for k in sorted(self._records)]

    def lost(self) -> list[int]:
        """Sequence numbers issued but never recorded."""
        with self._lock:
            return sorted(set(self._issued) - set(self._records))

    def attempts(self) -> list[Attempt]:
        return [a for r in self.records() for a in r.attempts]

    def summary(self) -> dict[str, Any]:
        recs = self.records()
        outcomes = Counter(r.outcome for r in recs)
        reasons = Counter(r.reason for r in recs if r.outcome == FAILED)
        attempt_errors = Counter(a.error_kind for r in recs for a in r.attempts if not a.ok)
        return {
            "issued": self.issued,
            "recorded": len(recs),
            "lost": len(self.lost()),
            "lost_seqs": self.lost()[:50],
            SUCCEEDED: outcomes.get(SUCCEEDED, 0),
            RETRIED: outcomes.get(RETRIED, 0),
            FAILED: outcomes.get(FAILED, 0),
            "failed_reasons": dict(reasons.most_common()),
            "attempts": sum(len(r.attempts) for r in recs),
            "attempt_errors": dict(attempt_errors.most_common()),
            "by_kind": dict(Counter(r.kind for r in recs)),
        }
