"""``specops exporter``: scrape llama-server (the only scraper) and serve Prometheus metrics."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from specops.exporter.app import Exporter
from specops.exporter.config import ExporterConfig

NAME = "exporter"
HELP = "serve Prometheus metrics for one llama-server (scrapes /metrics, /slots, /health, /props itself)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = ExporterConfig()
    p.add_argument("--server-url", default=d.server_url, help="llama-server base URL (default %(default)s)")
    p.add_argument("--listen-address", default=d.listen_address, help="default %(default)s (loopback)")
    p.add_argument("--listen-port", type=int, default=d.listen_port, help="default %(default)s")
    p.add_argument("--interval", type=float, default=d.interval,
                   help="seconds between scrapes of llama-server (default %(default)s)")
    p.add_argument("--timeout", type=float, default=d.timeout,
                   help="per-request timeout (default %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="default %(default)s")
    p.add_argument("--window", type=float, default=d.window,
                   help="window (s) of the exporter's acceptance and tokens/s gauges (default %(default)s)")
    pid = p.add_mutually_exclusive_group()
    pid.add_argument("--unit", help="llama-server systemd unit: PID and NRestarts via `systemctl show`")
    pid.add_argument("--pid", type=int, help="fixed llama-server PID")
    pid.add_argument("--no-pid-from-port", action="store_true",
                     help="do not look up the PID by the listening port (no process metrics)")
    logsrc = p.add_mutually_exclusive_group()
    logsrc.add_argument("--log-journal", metavar="UNIT",
                        help="follow the acceptance log line in the journal of UNIT (old builds)")
    logsrc.add_argument("--log-file", metavar="PATH", help="follow the acceptance log line in a file")
    p.add_argument("--nvidia-smi", default=d.nvidia_smi, help="auto, off or a path (default %(default)s)")
    p.add_argument("--gpu-interval", type=float, default=d.gpu_interval, help="default %(default)s")
    p.add_argument("--api-key-file", type=Path, help="file holding llama-server's API key")
    p.add_argument("--build-info", help="build-info.json of the llama.cpp install (default: via the PID)")
    p.add_argument("--speed-gate-file", help="the deploy's speed-gate record (e.g. /etc/specops/speed-gate.json): "
                   "plain vs speculative decode speed on this host, exported for the alerts")
    p.add_argument("--once", action="store_true", help="scrape once, print the exposition and exit")
    p.add_argument("--log-level", default=os.environ.get("SPECOPS_LOG_LEVEL", "INFO"))


def config_from_args(args: argparse.Namespace) -> ExporterConfig:
    api_key = args.api_key_file.read_text().strip() if args.api_key_file else None
    return ExporterConfig(
        server_url=args.server_url, listen_address=args.listen_address, listen_port=args.listen_port,
        interval=args.interval, timeout=args.timeout, max_body_bytes=args.max_body_bytes, window=args.window,
        unit=args.unit, pid=args.pid, pid_from_port=not args.no_pid_from_port,
        log_journal_unit=args.log_journal, log_file=args.log_file, nvidia_smi=args.nvidia_smi,
        gpu_interval=args.gpu_interval, api_key=api_key, build_info_path=args.build_info,
        speed_gate_file=args.speed_gate_file,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is not "log once"
    exporter = Exporter(config_from_args(args))
    if args.once:
        exporter.scraper.scrape_once()
        sys.stdout.write(exporter.exposition().decode())
        exporter.scraper.close()
        return 0
    return exporter.serve_forever()
