"""Exporter settings (from the command line or the systemd unit's ExecStart), and their checks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from specops.exporter.engine import ENGINES, LLAMA_CPP
from specops.exporter.speedgate import UNIT_DIRS

MIN_INTERVAL = 1.0  # seconds: every pass GETs /metrics, and each GET resets llama-server's rate gauges
MAX_INTERVAL = 3600.0  # an hour between passes is no watch (and longer waits overflow threading's timeouts)
DAY = 86400.0
MAX_PID = 4194304  # Linux's pid_max ceiling


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line naming the option."""


@dataclass
class ExporterConfig:
    server_url: str = "http://127.0.0.1:8080"
    engine: str = LLAMA_CPP  # llama.cpp | tabbyapi: which server's /metrics names and endpoints
    listen_address: str = "127.0.0.1"
    listen_port: int = 9840
    interval: float = 5.0  # seconds between llama-server scrapes (at most one /metrics GET per interval)
    timeout: float = 2.0  # per request, also the total deadline for reading a body
    max_body_bytes: int = 4 << 20
    window: float = 300.0  # seconds for the exporter's own acceptance / tokens-per-second gauges
    unit: str | None = None  # systemd unit of llama-server: PID and NRestarts via systemctl show
    pid: int | None = None  # fixed PID (tests, ad-hoc)
    pid_from_port: bool = True  # else: find the PID by the port the server listens on (psutil)
    log_journal_unit: str | None = None  # follow the acceptance log line in the journal
    log_file: str | None = None  # ... or in a file
    nvidia_smi: str = "auto"  # auto | off | PATH
    gpu_interval: float = 30.0
    props_retry: float = 60.0
    api_key: str | None = None
    build_info_path: str | None = None  # build-info.json of the llama.cpp install (else found via the PID)
    speed_gate_file: str | None = None  # the deploy's speed-gate record (plain vs speculative on this host)
    speed_gate_unit_dirs: tuple[str, ...] = UNIT_DIRS  # where the unit_file a record names may be (tests: a tmp dir)

    @property
    def server_port(self) -> int:
        parts = urlsplit(self.server_url)
        if parts.port:
            return parts.port
        return 443 if parts.scheme == "https" else 80

    def validate(self) -> None:
        """Raise :class:`ConfigError` for the first setting that cannot work."""
        check_url("--server-url", self.server_url)
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine: {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.engine != LLAMA_CPP and (self.log_journal_unit or self.log_file):
            raise ConfigError(f"--log-journal/--log-file: the acceptance log line is llama-server's; "
                              f"--engine {self.engine} does not write it")
        check_port("--listen-port", self.listen_port)
        check_number("--interval", self.interval, MIN_INTERVAL, MAX_INTERVAL)
        check_number("--timeout", self.timeout, 0.001, 600.0)
        check_number("--window", self.window, 1.0, 7 * DAY)
        if self.window < self.interval:
            raise ConfigError(f"--window: {self.window:g} is shorter than --interval {self.interval:g} "
                              "(the window needs two passes)")
        check_number("--gpu-interval", self.gpu_interval, 1.0, DAY)
        check_number("--max-body-bytes", self.max_body_bytes, 1024, 1 << 30)
        if self.pid is not None and not 1 <= self.pid <= MAX_PID:
            raise ConfigError(f"--pid: {self.pid} is not a process id (1 to {MAX_PID})")


def check_url(option: str, url: str) -> None:
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port out of range or not a number
    except ValueError as exc:
        raise ConfigError(f"{option}: {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{option}: {url!r}: need http:// or https:// and a host, e.g. http://127.0.0.1:8080")
    if port == 0:
        raise ConfigError(f"{option}: {url!r}: port 0")


def check_port(option: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise ConfigError(f"{option}: {port} is not a TCP port (1-65535)")


def check_number(option: str, value: float, minimum: float, maximum: float) -> None:
    if not math.isfinite(value) or not minimum <= value <= maximum:
        raise ConfigError(f"{option}: {value:g} is out of range ({minimum:g} to {maximum:g})")


def parse_number(option: str, text: str, integer: bool = False) -> float:
    """The command line's numbers, refused in one line (argparse would print its whole usage)."""
    try:
        return int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{option}: {text!r} is not {kind}") from None
