"""GPU memory per process from ``nvidia-smi`` (only when the binary exists)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

QUERY = ("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuProcessMemory:
    pid: int
    gpu_uuid: str
    used_bytes: int


class GpuError(RuntimeError):
    pass


def parse_compute_apps(text: str) -> list[GpuProcessMemory]:
    """Parse ``nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits``.

    Rows with ``[N/A]``/``[Not Supported]`` or other junk are skipped.
    """
    rows: list[GpuProcessMemory] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
            continue
        uuid = parts[1][:80]
        if not uuid or uuid.startswith("["):
            continue
        rows.append(GpuProcessMemory(pid=int(parts[0]), gpu_uuid=uuid, used_bytes=int(parts[2]) * MIB))
    return rows


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
