"""Exporter settings (from the command line or the systemd unit's ExecStart)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class ExporterConfig:
    server_url: str = "http://127.0.0.1:8080"
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

    @property
    def server_port(self) -> int:
        parts = urlsplit(self.server_url)
        if parts.port:
            return parts.port
        return 443 if parts.scheme == "https" else 80
