"""``specops soak``: a bounded load against one llama-server with invariant checks, faults and a report."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

from specops import keyfile
from specops.exporter.process import FixedPid, PidSource, PortPid, SystemdPid
from specops.knobs import knob
from specops.soak.alerts import evaluate, parse_duration
from specops.soak.backoff import Backoff
from specops.soak.config import FaultPlan, FaultSpec, SoakConfig, SoakConfigError, Thresholds

NAME = "soak"
HELP = "run a bounded load against llama-server, check invariants, inject faults, write reports/soak-*.md"
_CACHE_RAM = knob("cache_ram_mib")


def duration(text: str) -> float:
    """Seconds: ``600``, ``90s``, ``30m``, ``8h``, ``1h30m``."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    t, b = Thresholds(), Backoff()
    p.add_argument("--url", default="http://127.0.0.1:8080", help="llama-server base URL (default %(default)s)")
    bound = p.add_argument_group("bounds (at least one; the first reached ends the run)")
    bound.add_argument("--duration", type=duration, help="e.g. 600, 30m, 8h")
    bound.add_argument("--requests", type=int, help="number of requests")
    load = p.add_argument_group("load")
    load.add_argument("--concurrency", type=int, default=1, help="parallel clients (default %(default)s)")
    load.add_argument("--pin-slots", action="store_true",
                      help=f"worker i sends id_slot=i (server {knob('parallel').flag} = --concurrency): "
                           "per-slot figures")
    load.add_argument("--stream", action="store_true", help="streamed requests: time to first token measured")
    load.add_argument("--max-tokens", type=int, default=64, help="per request (default %(default)s)")
    load.add_argument("--timeout", type=float, default=120.0, help="per attempt, seconds (default %(default)s)")
    load.add_argument("--tasks", action="append", default=[], metavar="FILE",
                      help="task JSONL file (repeatable; default: the standard task set)")
    load.add_argument("--workload", action="append", default=[], help="only these workloads (repeatable)")
    load.add_argument("--seed", type=int, default=42)
    load.add_argument("--references", type=int, default=3, help="greedy reference prompts (default %(default)s)")
    load.add_argument("--reference-interval", type=duration, default=60.0,
                      help="re-check one reference this often (default %(default)ss)")
    load.add_argument("--api-key-file", type=Path)
    retry = p.add_argument_group("retries")
    retry.add_argument("--retry-initial", type=float, default=b.initial, help="first delay (default %(default)s)")
    retry.add_argument("--retry-max-delay", type=float, default=b.max_delay, help="default %(default)s")
    retry.add_argument("--give-up-after", type=duration, default=b.give_up_after,
                       help="per request, seconds of retrying before it fails (default %(default)s)")
    watch = p.add_argument_group("what to watch")
    pid = watch.add_mutually_exclusive_group()
    pid.add_argument("--unit", help="systemd unit of llama-server: MainPID, NRestarts, `systemctl restart`")
    pid.add_argument("--pid", type=int, help="fixed server PID")
    pid.add_argument("--no-pid", action="store_true", help="do not look for the server process (no RSS)")
    watch.add_argument("--exporter-url", help="specops exporter (scraped instead of llama-server /metrics)")
    watch.add_argument("--prometheus-url", help="evaluate the alert rules over the run window afterwards")
    watch.add_argument("--alert-rules", help="alert rules file for --prometheus-url "
                       "(e.g. configs/prometheus/rules/specops-alerts.yml)")
    watch.add_argument("--sample-interval", type=float, default=5.0, help="seconds (default %(default)s)")
    watch.add_argument("--bucket", type=duration, default=60.0,
                       help="width of the per-minute series, seconds (default %(default)s)")
    watch.add_argument("--expect-speculation", action="store_true", help="fail when nothing is drafted")
    faults = p.add_argument_group("faults")
    faults.add_argument("--faults", default="", help="comma list cycled in order: kill9, stop[:SECONDS], restart")
    faults.add_argument("--fault-first", type=duration, default=60.0, help="first fault at (default %(default)ss)")
    faults.add_argument("--fault-interval", type=duration, default=300.0, help="then every (default %(default)ss)")
    faults.add_argument("--fault-tail", type=duration, default=30.0,
                        help="no fault in the last N seconds (default %(default)s)")
    faults.add_argument("--fault-count", type=int,
                        help="exactly this many faults, a promise: they must fit in the duration (else refused), "
                             "each runs even when late (slow recoveries or reference recording on a loaded host), "
                             "the load going on past the duration for it (such a fault may start until N x "
                             "--recovery-timeout after the duration, and its recovery is watched), and a "
                             "fault that still did not run fails the soak (default: no count; late faults are "
                             "skipped)")
    faults.add_argument("--recovery-timeout", type=duration, default=300.0, help="default %(default)ss")
    th = p.add_argument_group("thresholds")
    th.add_argument("--max-failed-ratio", type=float, default=t.max_failed_ratio, help="default %(default)s")
    th.add_argument("--max-unexplained-errors", type=int, default=t.max_unexplained_errors,
                    help="failed attempts outside fault windows (default %(default)s)")
    th.add_argument("--min-tps-ratio", type=float, default=t.min_tps_ratio, help="default %(default)s")
    th.add_argument("--max-acceptance-drop", type=float, default=t.max_acceptance_drop, help="default %(default)s")
    th.add_argument("--max-rss-mb-per-hour", type=float, default=t.max_rss_mb_per_hour, help="default %(default)s")
    th.add_argument("--rss-allowance-mb", type=float, default=t.rss_allowance_mb,
                    help="memory growth that is not a leak (default: the server's prompt cache bound, "
                         f"{_CACHE_RAM.flag} from its command line, {_CACHE_RAM.llama_default} when not given)")
    th.add_argument("--min-rss-span", type=duration, default=t.min_rss_span,
                    help="seconds of one process before the slope is judged (default %(default)s)")
    out = p.add_argument_group("output")
    out.add_argument("--report-dir", default="reports", help="default %(default)s")
    out.add_argument("--run-id", help="report name soak-RUN_ID.* (default: UTC timestamp)")
    out.add_argument("--log-level", default=os.environ.get("SPECOPS_LOG_LEVEL", "INFO"))


def _api_key(path: Path | None) -> str | None:
    """The key the soak sends: the file's first, read as llama-server reads it (specops.keyfile); None without a
    file or a key. An unreadable file or a key no HTTP client can send is a SoakConfigError, never the key."""
    if path is None:
        return None
    try:
        return keyfile.client_key(path) or None
    except ValueError as exc:
        raise SoakConfigError(f"--api-key-file: {exc}") from None


def config_from_args(args: argparse.Namespace) -> SoakConfig:
    specs = tuple(FaultSpec.parse(f) for f in args.faults.split(",") if f.strip())
    return SoakConfig(
        url=args.url, duration=args.duration, max_requests=args.requests, concurrency=args.concurrency,
        pin_slots=args.pin_slots, stream=args.stream,
        max_tokens=args.max_tokens, request_timeout=args.timeout,
        backoff=Backoff(initial=args.retry_initial, max_delay=max(args.retry_max_delay, args.retry_initial),
                        give_up_after=args.give_up_after),
        references=args.references, reference_interval=args.reference_interval,
        task_files=tuple(args.tasks), workloads=tuple(args.workload), seed=args.seed, unit=args.unit,
        pid=args.pid, exporter_url=args.exporter_url, prometheus_url=args.prometheus_url,
        alert_rules=args.alert_rules, sample_interval=args.sample_interval, bucket_seconds=args.bucket,
        faults=FaultPlan(specs, first=args.fault_first, interval=args.fault_interval, tail=args.fault_tail,
                         recovery_timeout=args.recovery_timeout, limit=args.fault_count),
        thresholds=Thresholds(max_failed_ratio=args.max_failed_ratio,
                              max_unexplained_errors=args.max_unexplained_errors,
                              min_tps_ratio=args.min_tps_ratio, max_acceptance_drop=args.max_acceptance_drop,
                              max_rss_mb_per_hour=args.max_rss_mb_per_hour, min_rss_span=args.min_rss_span,
                              rss_allowance_mb=args.rss_allowance_mb),
        api_key=_api_key(args.api_key_file), run_id=args.run_id,
    )


def pid_source_for(cfg: SoakConfig, no_pid: bool) -> PidSource | None:
    if no_pid:
        return None
    if cfg.unit:
        return SystemdPid(cfg.unit)
    if cfg.pid:
        return FixedPid(cfg.pid)
    return PortPid(urlsplit(cfg.url).port or 80)


def run(args: argparse.Namespace) -> int:
    from specops.soak import report
    from specops.soak.runner import SoakRunner

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        cfg = config_from_args(args)
    except (SoakConfigError, ValueError) as exc:
        print(f"specops soak: {exc}", file=sys.stderr)
        return 2
    runner = SoakRunner(cfg, pid_source=pid_source_for(cfg, args.no_pid), expect_speculation=args.expect_speculation)
    signal.signal(signal.SIGTERM, lambda *_: runner.request_stop())
    result = runner.run()
    if cfg.prometheus_url:
        try:
            result.alerts = evaluate(cfg.prometheus_url, result.started_unix, result.ended_unix, cfg.alert_rules)
        except Exception as exc:  # the soak's own verdict stands without Prometheus
            result.notes.append(f"alert evaluation failed: {type(exc).__name__}: {exc}")
    paths = report.write(result, args.report_dir)
    s = result.summary
    print(f"soak {result.run_id}: {'PASS' if result.ok else 'FAIL'} — {s['issued']} requests: "
          f"{s['succeeded']} ok, {s['retried_then_succeeded']} retried then ok, {s['failed']} failed, "
          f"{s['lost']} lost; {len(result.faults)} faults")
    for c in result.failures:
        print(f"  FAIL {c.name}: {c.detail}")
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    return 0 if result.ok else 1
