"""Run a llama-server process for the lab, the bench and one-off checks.

The argv always comes from :func:`specops.argv.build_argv`; this module only owns the process:
a free loopback port, a log file, waiting for ``/health``, and a clean stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from specops.argv import build_argv
from specops.capabilities import Capabilities
from specops.client import LlamaServerClient
from specops.profile import ServerProfile


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerStartError(RuntimeError):
    """llama-server exited or never became healthy; carries the tail of its log."""


class ServerProcess:
    """One llama-server child process. Use as a context manager."""

    def __init__(
        self,
        binary: str | Path,
        profile: ServerProfile,
        caps: Capabilities,
        log_path: str | Path,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.profile = replace(profile, port=port or free_port(profile.host))
        self.argv = build_argv(self.profile, caps, binary=str(binary))
        self.log_path = Path(log_path)
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: LlamaServerClient | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.profile.host}:{self.profile.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def start(self, timeout: float = 180.0) -> LlamaServerClient:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        log.write(("$ " + " ".join(self.argv) + "\n").encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        self.client = LlamaServerClient(self.base_url, timeout=600.0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"llama-server exited with {self.proc.returncode} during start-up:\n{self.log_tail()}"
                )
            if self.client.is_healthy():
                return self.client
            time.sleep(0.2)
        self.stop()
        raise ServerStartError(f"llama-server not healthy after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.client:
            self.client.close()
        if not self.proc:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
