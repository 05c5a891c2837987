"""What a soak runs: bounds, load, retries, faults, thresholds. Validated on construction."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from specops.soak.backoff import Backoff

FAULT_KINDS = ("kill9", "stop", "restart")
_FAULT_RE = re.compile(r"^(?P<kind>kill9|stop|restart)(?::(?P<arg>\d+(?:\.\d+)?))?$")


class SoakConfigError(ValueError):
    """A soak that cannot run as asked: says what to change."""


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    pause: float = 0.0  # stop: seconds between SIGSTOP and SIGCONT

    @classmethod
    def parse(cls, text: str, default_pause: float = 5.0) -> FaultSpec:
        m = _FAULT_RE.match(text.strip())
        if not m:
            raise SoakConfigError(
                f"fault {text!r}: expected kill9, stop[:SECONDS] or restart"
            )
        kind, arg = m["kind"], m["arg"]
        if arg is not None and kind != "stop":
            raise SoakConfigError(f"fault {text!r}: only stop takes a duration")
        return cls(kind, float(arg) if arg is not None else (default_pause if kind == "stop" else 0.0))

    def label(self) -> str:
        return f"stop:{self.pause:g}" if self.kind == "stop" else self.kind


@dataclass(frozen=True)
class FaultPlan:
    """Faults cycled in order: the first at ``first`` seconds, then every ``interval`` seconds.

    A fault is only injected once the previous one has recovered, and never in the last ``tail``
    seconds of the run (so its recovery can be seen).

    With ``limit`` (``--fault-count N``) the plan is a promise of exactly N faults: they must fit in the
    duration (checked by :class:`SoakConfig`), each one runs even when it comes late (slow recoveries, slow
    reference recording on a loaded host), the load going on past the duration for it by at most
    :meth:`late_allowance` (N × the recovery timeout), and one that still did not run fails the soak.
    """

    faults: tuple[FaultSpec, ...] = ()
    first: float = 60.0
    interval: float = 300.0
    tail: float = 30.0
    recovery_timeout: float = 300.0
    limit: int | None = None  # exactly this many faults (a promise: see the class docstring)

    def slots(self, n: int) -> list[tuple[float, FaultSpec]]:
        """The first ``n`` slots, wherever the run ends."""
        return [(self.first + i * self.interval, self.faults[i % len(self.faults)])
                for i in range(n if self.faults else 0)]

    def late_allowance(self) -> float:
        """How long, with a fault count, the load may go on past the duration so that a late fault still runs
        and its recovery is seen: the recovery timeout once per promised fault (each late fault waits at most
        that long for the previous one to recover)."""
        return (self.limit or 0) * self.recovery_timeout

    def unfit(self, duration: float) -> str | None:
        """Why a fault count cannot be promised within ``duration`` (None when it can)."""
        if self.limit is None or not self.faults:
            return None
        if self.limit < 0:
            return f"fault count must be >= 0, not {self.limit}"
        fits = len(self.schedule(duration))
        if fits >= self.limit:
            return None
        t, spec = self.first + fits * self.interval, self.faults[fits % len(self.faults)]
        k = fits + 1
        return (f"--fault-count {self.limit}: fault {k} ({spec.label()}) would come at {t:g}s, after the "
                f"{duration:g}s duration less the {self.tail:g}s fault tail: lengthen the duration or lower "
                f"the fault count, --fault-first, --fault-interval or --fault-tail")

    def schedule(self, duration: float) -> list[tuple[float, FaultSpec]]:
        if not self.faults:
            return []
        out: list[tuple[float, FaultSpec]] = []
        t = self.first
        i = 0
        while t <= duration - self.tail and (self.limit is None or i < self.limit):
            out.append((t, self.faults[i % len(self.faults)]))
            i += 1
            t += self.interval
            if i > 100_000:  # bounded, whatever the arguments
                break
        return out


@dataclass(frozen=True)
class Thresholds:
    max_failed_ratio: float = 0.0  # requests that failed after all retries / requests
    max_unexplained_errors: int = 0  # failed attempts outside any fault's window
    max_drifts: int = 0
    min_tps_ratio: float = 0.5  # late decode tokens/s vs early (median of minutes without faults)
    max_acceptance_drop: float = 0.15  # early acceptance minus late acceptance
    max_rss_mb_per_hour: float = 100.0
    min_rss_span: float = 600.0  # seconds of one process needed before the RSS slope is judged
    # growth that is not a leak: the server's bounded prompt cache; None = read --cache-ram from its command line
    rss_allowance_mb: float | None = None
    rss_warmup: float = 60.0
    max_exporter_consecutive_failures: int = 1


@dataclass(frozen=True)
class SoakConfig:
    url: str = "http://127.0.0.1:8080"
    duration: float | None = 600.0
    max_requests: int | None = None
    concurrency: int = 1
    pin_slots: bool = False  # worker i sends id_slot=i: one worker per server slot (--parallel = concurrency)
    stream: bool = False  # streamed requests: time to first token measured
    max_tokens: int = 64
    request_timeout: float = 120.0
    backoff: Backoff = field(default_factory=Backoff)
    references: int = 3
    reference_interval: float = 60.0
    task_files: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    seed: int = 42
    unit: str | None = None
    pid: int | None = None
    exporter_url: str | None = None
    prometheus_url: str | None = None
    alert_rules: str | None = None
    sample_interval: float = 5.0
    bucket_seconds: float = 60.0  # width of the "per minute" series
    faults: FaultPlan = field(default_factory=FaultPlan)
    thresholds: Thresholds = field(default_factory=Thresholds)
    api_key: str | None = None
    run_id: str | None = None
    max_duration_cap: float = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        if self.duration is None and self.max_requests is None:
            raise SoakConfigError("a soak must be bounded: give a duration, a request count, or both")
        if self.duration is not None and not 0 < self.duration <= self.max_duration_cap:
            raise SoakConfigError(f"duration must be within (0, {self.max_duration_cap:.0f}] seconds")
        if self.max_requests is not None and self.max_requests < 1:
            raise SoakConfigError("max requests must be >= 1")
        if not 1 <= self.concurrency <= 64:
            raise SoakConfigError("concurrency must be within 1..64")
        if self.max_tokens < 1 or self.request_timeout <= 0:
            raise SoakConfigError("max tokens must be >= 1 and the request timeout > 0")
        if self.references < 0 or min(self.reference_interval, self.sample_interval, self.bucket_seconds) <= 0:
            raise SoakConfigError("references >= 0; reference, sample and bucket intervals > 0")
        if any(f.kind == "restart" for f in self.faults.faults) and not self.unit:
            raise SoakConfigError("a restart fault needs --unit (it runs `systemctl restart UNIT`)")
        if self.faults.faults and self.faults.interval <= 0:
            raise SoakConfigError("fault interval must be > 0")
        if self.faults.faults and self.faults.recovery_timeout <= 0:
            raise SoakConfigError("recovery timeout must be > 0")
        unfit = self.faults.unfit(self.bound_seconds)
        if unfit:
            raise SoakConfigError(unfit)

    @property
    def bound_seconds(self) -> float:
        """The wall-clock bound used when only a request count was given."""
        return self.duration if self.duration is not None else self.max_duration_cap
