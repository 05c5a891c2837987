"""``specops exporter``: scrape llama-server (the only scraper) and serve Prometheus metrics."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from specops import keyfile
from specops.exporter.app import Exporter, StartupError
from specops.exporter.config import MAX_INTERVAL, MIN_INTERVAL, ConfigError, ExporterConfig, parse_number
from specops.exporter.speedgate import UNIT_DIRS

NAME = "exporter"
HELP = "serve Prometheus metrics for one llama-server (scrapes /metrics, /slots, /health, /props itself)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    # numbers are read as text and checked by config_from_args: a bad value is one line, not argparse's usage
    d = ExporterConfig()
    p.add_argument("--server-url", default=d.server_url,
                   help="llama-server base URL, http(s)://HOST[:PORT] (default %(default)s)")
    p.add_argument("--engine", default=d.engine,
                   help="the server behind --server-url: llama.cpp (llama-server) or tabbyapi (TabbyAPI with "
                   "network.enable_metrics); the series TabbyAPI cannot give are listed in "
                   "llamacpp_exporter_unsupported_series (default %(default)s)")
    p.add_argument("--listen-address", default=d.listen_address, help="default %(default)s (loopback)")
    p.add_argument("--listen-port", default=str(d.listen_port), help="1-65535 (default %(default)s)")
    p.add_argument("--interval", default=f"{d.interval:g}",
                   help=f"seconds between scrapes of llama-server, {MIN_INTERVAL:g} to {MAX_INTERVAL:g} "
                   "(default %(default)s)")
    p.add_argument("--timeout", default=f"{d.timeout:g}", help="per-request timeout (default %(default)s)")
    p.add_argument("--max-body-bytes", default=str(d.max_body_bytes), help="default %(default)s")
    p.add_argument("--window", default=f"{d.window:g}",
                   help="window (s) of the exporter's acceptance and tokens/s gauges, at least --interval "
                   "(default %(default)s)")
    pid = p.add_mutually_exclusive_group()
    pid.add_argument("--unit", help="llama-server systemd unit: PID and NRestarts via `systemctl show`")
    pid.add_argument("--pid", help="fixed llama-server PID")
    pid.add_argument("--no-pid-from-port", action="store_true",
                     help="do not look up the PID by the listening port (no process metrics)")
    logsrc = p.add_mutually_exclusive_group()
    logsrc.add_argument("--log-journal", metavar="UNIT",
                        help="follow the acceptance log line in the journal of UNIT (old builds)")
    logsrc.add_argument("--log-file", metavar="PATH", help="follow the acceptance log line in a file")
    p.add_argument("--nvidia-smi", default=d.nvidia_smi, help="auto, off or a path (default %(default)s)")
    p.add_argument("--gpu-interval", default=f"{d.gpu_interval:g}", help="default %(default)s")
    p.add_argument("--api-key-file", type=Path, help="file holding llama-server's API key")
    p.add_argument("--build-info", help="build-info.json of the llama.cpp install (default: via the PID)")
    p.add_argument("--speed-gate-file", help="the deploy's speed-gate record (e.g. /etc/specops/speed-gate.json): "
                   "plain vs speculative decode speed on this host, exported for the alerts")
    p.add_argument("--speed-gate-unit-dir", action="append", metavar="DIR",
                   help="where a record's unit_file may be (default: /etc/systemd/system and /run/systemd/system); "
                        "repeat for several")
    p.add_argument("--once", action="store_true", help="scrape once, print the exposition and exit")
    p.add_argument("--log-level", default=os.environ.get("SPECOPS_LOG_LEVEL", "INFO"))


def _api_key(path: Path | None) -> str | None:
    """The key the exporter sends: the file's first, read as llama-server reads it (specops.keyfile); None without
    a file or a key. An unreadable file or a key no HTTP client can send is one line, never the key."""
    if path is None:
        return None
    try:
        return keyfile.client_key(path) or None
    except ValueError as exc:
        raise ConfigError(f"--api-key-file: {exc}") from None


def config_from_args(args: argparse.Namespace) -> ExporterConfig:
    """The settings, checked; raises :class:`ConfigError` (one line) for the first bad one."""
    cfg = ExporterConfig(
        server_url=args.server_url, engine=args.engine, listen_address=args.listen_address,
        listen_port=int(parse_number("--listen-port", str(args.listen_port), integer=True)),
        interval=parse_number("--interval", str(args.interval)),
        timeout=parse_number("--timeout", str(args.timeout)),
        max_body_bytes=int(parse_number("--max-body-bytes", str(args.max_body_bytes), integer=True)),
        window=parse_number("--window", str(args.window)),
        unit=args.unit, pid=None if args.pid is None else int(parse_number("--pid", str(args.pid), integer=True)),
        pid_from_port=not args.no_pid_from_port,
        log_journal_unit=args.log_journal, log_file=args.log_file, nvidia_smi=args.nvidia_smi,
        gpu_interval=parse_number("--gpu-interval", str(args.gpu_interval)), api_key=_api_key(args.api_key_file),
        build_info_path=args.build_info, speed_gate_file=args.speed_gate_file,
        speed_gate_unit_dirs=tuple(args.speed_gate_unit_dir) if args.speed_gate_unit_dir else UNIT_DIRS,
    )
    cfg.validate()
    if not isinstance(logging.getLevelName(str(args.log_level).upper()), int):
        raise ConfigError(f"--log-level: {args.log_level!r} is not a logging level (DEBUG, INFO, WARNING, ERROR)")
    return cfg


def _refuse(message: str) -> int:
    sys.stderr.write(f"specops exporter: error: {message}\n")
    return 2


def run(args: argparse.Namespace) -> int:
    """Exit 2 with one line on stderr for bad settings or a failed start (port in use); 0 after a stop."""
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        return _refuse(str(exc))
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is not "log once"
    exporter = Exporter(cfg)
    if args.once:
        exporter.scraper.scrape_once()
        sys.stdout.write(exporter.exposition().decode())
        exporter.scraper.close()
        return 0
    try:
        return exporter.serve_forever()
    except StartupError as exc:
        return _refuse(str(exc))
