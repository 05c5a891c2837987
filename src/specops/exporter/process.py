"""The llama-server process: find its PID, read its resource usage (psutil), read its command line.

PID discovery, in order of preference:

1. ``--unit NAME``: ``systemctl show -p MainPID -p NRestarts -p MemoryMax NAME``. Authoritative under systemd,
   gives systemd's restart count too, and works as an unprivileged static system user over D-Bus, unlike (2)
   (not as a DynamicUser: dbus-daemon drops DynamicUser clients, systemd/systemd#22737).
2. the listening port of ``--server-url`` via ``psutil.net_connections`` (maps sockets to PIDs through
   ``/proc/*/fd``: needs root or the same user; used for ad-hoc runs and tests). The PID is cached while the
   process lives, so the scan runs only after a restart.
3. ``--pid N`` (fixed).
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePath
from typing import Protocol

import psutil

from specops.knobs import KNOBS, knob


class ProcessError(RuntimeError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class PidInfo:
    pid: int | None
    systemd_restarts: int | None = None
    memory_max_bytes: int | None = None


@dataclass(frozen=True)
class ProcessStats:
    pid: int
    start_time: float
    rss_bytes: int
    vms_bytes: int
    cpu_seconds: float
    threads: int
    open_fds: int | None  # None when /proc/PID/fd is not readable (another user without ptrace rights)
    cmdline: tuple[str, ...] = field(default=())
    # resident memory not backed by files (heap, KV and prompt caches); the mmapped model weights are
    # file-backed and page in as new tokens touch them, so RSS grows for a while without any leak
    anon_bytes: int | None = None


class PidSource(Protocol):
    def find(self) -> PidInfo: ...

    def forget(self) -> None: ...

    def describe(self) -> str: ...


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def parse_systemctl_show(text: str) -> PidInfo:
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    pid = _int_or_none(props.get("MainPID", ""))
    return PidInfo(pid=pid if pid else None, systemd_restarts=_int_or_none(props.get("NRestarts", "")),
                   memory_max_bytes=_int_or_none(props.get("MemoryMax", "")))


def pid_by_cmdline(port: int) -> int | None:
    """The oldest process whose command line says ``--port PORT`` (world-readable /proc/PID/cmdline)."""
    found: list[tuple[float, int]] = []
    port_flag = knob("port").flag
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        try:
            argv = proc.info["cmdline"] or []
        except psutil.Error:
            continue
        for i, arg in enumerate(argv):
            if (arg == port_flag and i + 1 < len(argv) and argv[i + 1] == str(port)) or arg == f"{port_flag}={port}":
                found.append((proc.info["create_time"] or 0.0, proc.pid))
                break
    return min(found)[1] if found else None


class SystemdPid:
    """``systemctl show`` for PID, NRestarts and MemoryMax; if systemd cannot be asked (no D-Bus for this user),
    the PID alone from the command line of the process serving ``fallback_port``."""

    def __init__(self, unit: str, systemctl: str = "systemctl", timeout: float = 5.0,
                 fallback_port: int | None = None) -> None:
        self.unit = unit
        self.argv = [systemctl, "show", "-p", "MainPID", "-p", "NRestarts", "-p", "MemoryMax", "--", unit]
        self.timeout = timeout
        self.fallback_port = fallback_port
        self.last_error: str | None = None

    def describe(self) -> str:
        return f"systemd:{self.unit}"

    def forget(self) -> None:
        pass

    def _show(self) -> PidInfo:
        try:
            out = subprocess.run(self.argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ProcessError("systemctl", f"{' '.join(self.argv)}: {exc}") from exc
        if out.returncode != 0:
            detail = out.stderr.strip()[:200]
            raise ProcessError("systemctl", f"{' '.join(self.argv)}: rc={out.returncode} {detail}")
        return parse_systemctl_show(out.stdout)

    def find(self) -> PidInfo:
        try:
            info = self._show()
            self.last_error = None
            return info
        except ProcessError as exc:
            self.last_error = str(exc)
            if self.fallback_port is None:
                raise
            return PidInfo(pid_by_cmdline(self.fallback_port))


class PortPid:
    def __init__(self, port: int) -> None:
        self.port = port
        self._cached: psutil.Process | None = None

    def describe(self) -> str:
        return f"port:{self.port}"

    def forget(self) -> None:
        self._cached = None

    def find(self) -> PidInfo:
        cached = self._cached
        if cached is not None and cached.is_running():
            return PidInfo(cached.pid)
        self._cached = None
        try:
            conns = psutil.net_connections(kind="tcp")
        except psutil.Error as exc:
            raise ProcessError("access_denied", f"cannot list sockets: {exc}") from exc
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port and c.pid:
                with contextlib.suppress(psutil.Error):
                    self._cached = psutil.Process(c.pid)
                    return PidInfo(c.pid)
        pid = pid_by_cmdline(self.port)  # sockets of other users have no PID without privileges
        with contextlib.suppress(psutil.Error):
            self._cached = psutil.Process(pid) if pid else None
        return PidInfo(pid)


class FixedPid:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def describe(self) -> str:
        return f"pid:{self.pid}"

    def forget(self) -> None:
        pass

    def find(self) -> PidInfo:
        return PidInfo(self.pid if psutil.pid_exists(self.pid) else None)


def read_process(pid: int) -> ProcessStats:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            mem = proc.memory_info()
            cpu = proc.cpu_times()
            start = proc.create_time()
            threads = proc.num_threads()
            try:
                fds: int | None = proc.num_fds()
            except psutil.AccessDenied:
                fds = None
            try:
                cmdline = tuple(proc.cmdline())
            except psutil.AccessDenied:
                cmdline = ()
    except psutil.NoSuchProcess as exc:
        raise ProcessError("gone", f"process {pid} is gone") from exc
    except psutil.AccessDenied as exc:
        raise ProcessError("access_denied", f"process {pid}: access denied") from exc
    except psutil.Error as exc:
        raise ProcessError("other", f"process {pid}: {exc}") from exc
    shared = getattr(mem, "shared", None)  # Linux: RssFile + RssShmem
    return ProcessStats(pid=pid, start_time=start, rss_bytes=int(mem.rss), vms_bytes=int(mem.vms),
                        cpu_seconds=float(cpu.user + cpu.system), threads=int(threads), open_fds=fds,
                        cmdline=cmdline, anon_bytes=None if shared is None else max(0, int(mem.rss - shared)))


@dataclass(frozen=True)
class LaunchSettings:
    """What llama-server was told on its command line (both flag eras)."""

    target_model: str = ""
    draft_model: str = ""
    spec_type: str = ""  # "" = not given
    draft_n_max: str = ""
    draft_n_min: str = ""
    cache_ram_mib: str = ""  # the prompt cache bound ("" = llama.cpp's default)
    # where the models run ("" = llama.cpp's default: every device the build finds, the draft split like the target)
    device: str = ""
    draft_device: str = ""
    tensor_split: str = ""
    spec_default: bool = False

    @property
    def speculation_expected(self) -> bool:
        if self.spec_type:
            return self.spec_type != "none"
        return bool(self.draft_model) or self.spec_default


# LaunchSettings field <- knob: each field is named after its knob (target_model: the model knob), and read in every
# spelling of every era (a server may run an older build); spec_default is the spec type's value flag
_KNOB_OF = {"target_model": "model"}
_FIELDS = {f.name: _KNOB_OF.get(f.name, f.name) for f in fields(LaunchSettings)
           if _KNOB_OF.get(f.name, f.name) in {k.name for k in KNOBS}}
_VALUE_FLAGS = {flag: field for field, name in _FIELDS.items() for flag in knob(name).own_spellings}
# the n-gram types' own spellings of a field's knob (--spec-ngram-mod-n-max: the draft length under ngram-mod), read
# where the command line lacks the setting's own spelling (a draft model's length outranks an n-gram type's)
_TYPE_FLAGS = {flag: field for field, name in _FIELDS.items() for _t, flag in knob(name).per_spec_type
               if flag not in _VALUE_FLAGS}
_SPEC_DEFAULT = knob("spec_type").for_value("default")


def prompt_cache_bound_mib(cmdline: tuple[str, ...] | list[str]) -> float:
    """MiB of host RAM llama-server's prompt cache may fill (0 = disabled; unbounded counts as infinite)."""
    value = parse_launch(cmdline).cache_ram_mib
    default = float(knob("cache_ram_mib").llama_default)  # type: ignore[arg-type]
    try:
        mib = float(value) if value else default
    except ValueError:
        return default
    return float("inf") if mib < 0 else mib


def parse_launch(cmdline: tuple[str, ...] | list[str]) -> LaunchSettings:
    found: dict[str, str] = {}
    per_type: dict[str, str] = {}  # from the n-gram types' spellings: what the setting's own spelling leaves unsaid
    spec_default = False
    args = list(cmdline[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        if arg == _SPEC_DEFAULT:
            spec_default = True
        elif flag in _VALUE_FLAGS or flag in _TYPE_FLAGS:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            if not eq:
                i += 1
            key = _VALUE_FLAGS.get(flag) or _TYPE_FLAGS[flag]
            into = found if flag in _VALUE_FLAGS else per_type
            into[key] = PurePath(value).name if key.endswith("_model") else value[:64]
        i += 1
    return LaunchSettings(spec_default=spec_default, **{**per_type, **found})


def build_info_for(cmdline: tuple[str, ...]) -> Path | None:
    """``PREFIX/build-info.json`` next to ``PREFIX/bin/llama-server`` (the llama_cpp role's layout)."""
    if not cmdline:
        return None
    candidate = Path(cmdline[0]).parent.parent / "build-info.json"
    return candidate if candidate.is_absolute() else None
