"""The invariants a soak judges. Each check passes, fails (with the reason) or is skipped (with why)."""

from __future__ import annotations

import itertools
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from specops.knobs import knob
from specops.soak.accounting import FAILED, RequestRecord
from specops.soak.config import Thresholds
from specops.soak.faults import FaultEvent, MissedFault, in_fault_window
from specops.soak.reference import Drift
from specops.soak.sampler import ExporterSample, PidChange
from specops.soak.timeline import Bucket

PASS, FAIL, SKIP = "pass", "fail", "skip"
FAULT_GRACE = 2.0  # seconds around a fault window in which errors are explained by it


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_accounting(issued: int, lost: list[int]) -> Check:
    if lost:
        return Check("accounting", FAIL, f"{len(lost)} of {issued} requests lost (never recorded): {lost[:10]}")
    return Check("accounting", PASS, f"all {issued} issued requests accounted for")


def check_failed(records: list[RequestRecord], th: Thresholds) -> Check:
    n = len(records)
    failed = [r for r in records if r.outcome == FAILED]
    ratio = len(failed) / n if n else 0.0
    if n and ratio > th.max_failed_ratio:
        first = failed[0]
        return Check("failed_requests", FAIL,
                     f"{len(failed)}/{n} requests failed after retries ({ratio:.1%} > {th.max_failed_ratio:.1%});"
                     f" first: #{first.seq} at {first.end:.1f}s: {first.reason}")
    return Check("failed_requests", PASS, f"{len(failed)}/{n} failed after retries")


def check_unexplained_errors(records: list[RequestRecord], faults: list[FaultEvent], th: Thresholds) -> Check:
    bad = [(r.seq, a) for r in records for a in r.attempts
           if not a.ok and not in_fault_window(a.end, faults, FAULT_GRACE)]
    total = sum(1 for r in records for a in r.attempts if not a.ok)
    if len(bad) > th.max_unexplained_errors:
        seq, a = bad[0]
        return Check("error_rate", FAIL,
                     f"{len(bad)} failed attempts outside any fault window (limit {th.max_unexplained_errors});"
                     f" first: #{seq} at {a.end:.1f}s: {a.error_kind}: {a.error}")
    return Check("error_rate", PASS, f"{total} failed attempts, all within fault windows" if total
                 else "no failed attempts")


def check_references(n_refs: int, recorded: int, drifts: list[Drift], checks: int, th: Thresholds) -> Check:
    if n_refs == 0:
        return Check("reference_texts", SKIP, "no reference prompts requested")
    if recorded < n_refs:
        return Check("reference_texts", FAIL, f"only {recorded}/{n_refs} reference texts could be recorded")
    if len(drifts) > th.max_drifts:
        d = drifts[0]
        return Check("reference_texts", FAIL,
                     f"greedy output drifted on {len(drifts)}/{checks} checks; first: {d.task_id} at {d.t:.1f}s "
                     f"(request #{d.seq}) diverges at char {d.position}: expected {d.expected!r}, got {d.got!r}")
    if checks == 0:
        return Check("reference_texts", SKIP, f"{recorded} recorded, run too short for a re-check")
    return Check("reference_texts", PASS, f"{checks} re-checks of {recorded} references, all identical")


def _early_late(values: list[float]) -> tuple[list[float], list[float]] | None:
    if len(values) < 4:
        return None
    k = max(2, len(values) // 3)
    return values[:k], values[-k:]


def _quiet(buckets: list[Bucket]) -> list[Bucket]:
    """Buckets without a fault and with finished requests (a fault's minute is not 'steady')."""
    return [b for b in buckets if b.faults == 0 and b.requests_ok > 0]


def check_throughput(buckets: list[Bucket], th: Thresholds) -> Check:
    vals = [b.decode_tps for b in _quiet(buckets) if b.decode_tps is not None]
    split = _early_late(vals)
    if split is None:
        return Check("decode_tps", SKIP, f"{len(vals)} steady minutes: at least 4 needed to compare early/late")
    early, late = statistics.median(split[0]), statistics.median(split[1])
    ratio = late / early if early > 0 else 0.0
    detail = f"median decode {early:.1f} tok/s early, {late:.1f} late (×{ratio:.2f}, min ×{th.min_tps_ratio:.2f})"
    return Check("decode_tps", FAIL if ratio < th.min_tps_ratio else PASS, detail)


def check_acceptance(buckets: list[Bucket], th: Thresholds, expect_speculation: bool) -> Check:
    drafted = sum(b.draft_n for b in buckets)
    if drafted == 0:
        if expect_speculation:
            return Check("acceptance", FAIL, "speculation expected but no request reported draft tokens")
        return Check("acceptance", SKIP, "no draft tokens reported (speculation off?)")
    vals = [b.acceptance for b in _quiet(buckets) if b.acceptance is not None]
    overall = sum(b.draft_accepted for b in buckets) / drafted
    split = _early_late(vals)
    if split is None:
        return Check("acceptance", SKIP, f"overall {overall:.3f}; {len(vals)} steady minutes, 4 needed for a trend")
    early, late = statistics.median(split[0]), statistics.median(split[1])
    drop = early - late
    detail = (f"overall {overall:.3f}; median {early:.3f} early, {late:.3f} late "
              f"(drop {drop:+.3f}, max {th.max_acceptance_drop:.2f})")
    return Check("acceptance", FAIL if drop > th.max_acceptance_drop else PASS, detail)


def check_rss(trend: dict[str, Any], had_pid_source: bool, th: Thresholds) -> Check:
    """Memory growth of the longest-running server process: anonymous memory when known (RSS also counts the
    mmapped weights paging in), judged by slope; growth within ``rss_allowance_mb`` (the bounded prompt cache,
    --cache-ram) is not a leak."""
    judged = trend.get("judged")
    if not had_pid_source:
        return Check("rss_growth", SKIP, "no way to find the server PID (give --unit or --pid)")
    if judged is None:
        longest = max((g["span_s"] for g in trend.get("segments", [])), default=0.0)
        return Check("rss_growth", SKIP, f"no process ran long enough to fit a slope (longest {longest:.0f}s, "
                     f"warm-up {trend.get('warmup_s', 0):.0f}s)")
    what = "anonymous memory" if trend.get("series") == "anon_bytes" else "RSS"
    slope = judged["slope_mb_per_hour"]
    growth = judged["last_mb"] - judged["first_mb"]
    text = (f"{what} of PID {judged['pid']}: {judged['first_mb']:.0f} → {judged['last_mb']:.0f} MB over "
            f"{judged['span_s']:.0f}s, slope {slope:+.1f} MB/h" if slope is not None else f"{what} flat")
    if judged["span_s"] < th.min_rss_span:
        return Check("rss_growth", SKIP, f"{text}; {th.min_rss_span:.0f}s of one process needed to judge")
    if slope is not None and slope > th.max_rss_mb_per_hour:
        allowance = th.rss_allowance_mb or 0.0
        if growth <= allowance:
            return Check("rss_growth", PASS, f"{text}: growth {growth:.0f} MB within the {allowance:.0f} MB "
                         f"allowance (the prompt cache's {knob('cache_ram_mib').flag} bound)")
        return Check("rss_growth", FAIL, f"{text} > {th.max_rss_mb_per_hour:.0f} MB/h"
                     + (f", growth {growth:.0f} MB beyond the {allowance:.0f} MB allowance" if allowance else ""))
    return Check("rss_growth", PASS, text)


def observed_restarts(changes: list[PidChange]) -> int:
    """New server processes seen: a PID different from the last known one (gaps with no PID ignored)."""
    last: int | None = None
    n = 0
    for c in changes:
        if c.new is None:
            continue
        if last is not None and c.new != last:
            n += 1
        last = c.new
    return n


def nrestarts_increments(values: list[tuple[float, int]]) -> int:
    """Automatic restarts systemd counted: the sum of increases. A manual ``systemctl restart`` resets
    NRestarts to 0, so the last value minus the first would undercount."""
    total = 0
    for (_, a), (_, b) in itertools.pairwise(values):
        total += b - a if b > a else b  # a drop is a reset: whatever it counted since then is new
    return total


def check_restarts(changes: list[PidChange], nrestarts: list[tuple[float, int]], faults: list[FaultEvent],
                   had_pid_source: bool) -> Check:
    if not had_pid_source:
        return Check("restarts", SKIP, "no way to find the server PID")
    ok_faults = [f for f in faults if not f.error]
    expected = sum(1 for f in ok_faults if f.kind in ("kill9", "restart"))
    seen = observed_restarts(changes)
    parts = [f"{seen} new server PIDs, {expected} expected from faults"]
    status = PASS
    if seen > expected:
        status = FAIL
        parts.insert(0, f"{seen - expected} unexpected restart(s)")
    if nrestarts:
        delta = nrestarts_increments(nrestarts)
        kills = sum(1 for f in ok_faults if f.kind == "kill9")
        parts.append(f"NRestarts +{delta} (kill -9 faults: {kills})")
        if delta > kills:
            status = FAIL
            parts.insert(0, f"systemd restarted the unit {delta - kills} time(s) more than the kill faults explain")
    return Check("restarts", status, "; ".join(parts))


def check_fault_count(promised: int, faults: list[FaultEvent], missed: list[MissedFault]) -> Check:
    """``--fault-count N`` is a promise: N faults run, or the soak fails saying which did not and why."""
    if missed:
        first = missed[0]
        more = f"; {len(missed) - 1} more after it did not run either" if len(missed) > 1 else ""
        return Check("fault_count", FAIL, first.describe() + more)
    if not promised:
        return Check("fault_count", SKIP, "no fault count promised (--fault-count)")
    if len(faults) < promised:  # missed() names every one not run: this is a guard against a bookkeeping bug
        return Check("fault_count", FAIL, f"{len(faults)} of {promised} promised faults ran")
    return Check("fault_count", PASS, f"{len(faults)} of {promised} promised faults ran")


def check_faults(faults: list[FaultEvent]) -> Check:
    if not faults:
        return Check("fault_recovery", SKIP, "no faults injected")
    broken = [f for f in faults if f.error]
    if broken:
        f = broken[0]
        return Check("fault_recovery", FAIL, f"fault {f.label} at {f.t:.1f}s could not be injected: {f.error}")
    lost = [f for f in faults if f.recovered_at is None]
    if lost:
        f = lost[0]
        return Check("fault_recovery", FAIL, f"no successful request after fault {f.label} at {f.t:.1f}s")
    ttrs = [f.time_to_recovery or 0.0 for f in faults]
    return Check("fault_recovery", PASS, f"{len(faults)} faults, all recovered (max {max(ttrs):.1f}s)")


def check_exporter(samples: list[ExporterSample] | None, th: Thresholds) -> Check:
    if samples is None:
        return Check("exporter_up", SKIP, "no --exporter-url given")
    if not samples:
        return Check("exporter_up", FAIL, "the exporter was never scraped")
    worst = run = 0
    first_bad: ExporterSample | None = None
    for s in samples:
        if s.up:
            run = 0
            continue
        run += 1
        worst = max(worst, run)
        first_bad = first_bad or s
    down = sum(1 for s in samples if not s.up)
    if worst > th.max_exporter_consecutive_failures and first_bad is not None:
        return Check("exporter_up", FAIL,
                     f"exporter down on {down}/{len(samples)} scrapes ({worst} in a row); first at "
                     f"{first_bad.t:.1f}s: {first_bad.error}")
    return Check("exporter_up", PASS, f"answered {len(samples) - down}/{len(samples)} scrapes")
