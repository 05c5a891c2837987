"""GPU memory per process from ``nvidia-smi`` (only when the binary exists)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from specops.nvsmi import MIB_CELL, header_names, read_table

QUERY_FIELDS = ("pid", "gpu_uuid", "used_memory")
QUERY = (f"--query-compute-apps={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
MIB = 1024 * 1024
# nvidia-smi's header says used_gpu_memory / process_name even when asked for used_memory / name
_ALIASES = {"used_gpu_memory": "used_memory", "name": "process_name"}


@dataclass(frozen=True)
class GpuProcessMemory:
    pid: int
    gpu_uuid: str
    used_bytes: int


class GpuError(RuntimeError):
    pass


def _header_names(cells: list[str]) -> list[str] | None:
    """Column names if ``cells`` is a ``--format=csv`` header line (``used_gpu_memory [MiB]`` -> ``used_memory``)."""
    names = [_ALIASES.get(n, n) for n in header_names(cells) or []]
    return names if "pid" in names else None


def _process(row: dict[str, str]) -> GpuProcessMemory | None:
    pid, uuid, mem = row["pid"], row["gpu_uuid"][:80], MIB_CELL.fullmatch(row["used_memory"])
    if not (pid.isascii() and pid.isdigit()) or mem is None or not uuid or uuid.startswith("["):
        return None
    return GpuProcessMemory(pid=int(pid), gpu_uuid=uuid, used_bytes=int(mem.group(1)) * MIB)


def parse_compute_apps(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[GpuProcessMemory]:
    """Parse ``nvidia-smi --query-compute-apps=FIELDS --format=csv[,noheader][,nounits]``.

    The columns are ``fields`` unless a header line (``--format=csv``) names them. Rows whose memory is
    ``[N/A]`` (Windows in WDDM mode), ``[Not Supported]`` or other junk are skipped.
    """
    header, rows = read_table(text, _header_names)
    names = header or [_ALIASES.get(f, f) for f in fields]
    if not {"pid", "gpu_uuid", "used_memory"} <= set(names):
        return []
    found = (_process(dict(zip(names, cells, strict=True))) for _line, cells in rows if len(cells) == len(names))
    return [p for p in found if p is not None]


def find_nvidia_smi(setting: str) -> str | None:
    """``auto`` → on PATH or None; ``off`` → None; else the given path."""
    if setting == "off":
        return None
    if setting == "auto":
        return shutil.which("nvidia-smi")
    return setting


def query_compute_apps(binary: str, timeout: float = 5.0) -> list[GpuProcessMemory]:
    try:
        out = subprocess.run([binary, *QUERY], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GpuError(f"{binary}: {exc}") from exc
    if out.returncode != 0:
        raise GpuError(f"{binary}: rc={out.returncode}: {(out.stderr or out.stdout).strip()[:200]}")
    return parse_compute_apps(out.stdout[: 1 << 20])
