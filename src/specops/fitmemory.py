"""How much memory there is: host RAM (psutil), or each GPU's from nvidia-smi, rocm-smi, ``llama-server
--list-devices`` or the operator (``--device-mib``), into one :class:`Memory` (the pool, and each device's figures).

Available: host RAM ``psutil.virtual_memory().available`` (or total with ``--memory-basis total``), or GPU
memory summed over GPUs for GPU backends (nvidia-smi's memory.free, which leaves out the driver's reserve;
rocm-smi's VRAM total − used), or a given number. Unified-memory GPUs (DGX Spark GB10) report no GPU memory:
those need --memory-mib.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from specops.devices import DeviceError, parse_list_devices, require_device
from specops.fitparams import MIB, FitError
from specops.knobs import LIST_DEVICES_FLAG
from specops.nvsmi import MIB_CELL, header_names, read_table

GPU_BACKENDS = ("cuda", "rocm", "hip")
NVIDIA_FIELDS = ("memory.total", "memory.used", "memory.free")  # what measure_memory asks nvidia-smi for
_ROCM_TOTAL = re.compile(r"vram total memory \(b\)", re.IGNORECASE)
_ROCM_USED = re.compile(r"vram (total )?used memory \(b\)", re.IGNORECASE)


@dataclass
class Memory:
    kind: str  # "host RAM" or "GPU"
    available: int
    total: int
    source: str
    devices: list[dict[str, Any]] = field(default_factory=list)  # per device: name, free_mib, total_mib, ...


def _smi_header(cells: list[str]) -> list[str] | None:
    """Column names if ``cells`` is a ``--format=csv`` header (``memory.total [MiB]`` -> ``memory.total``)."""
    names = header_names(cells)
    return names if names and any(n.startswith("memory.") for n in names) else None


def _smi_mib(cell: str, line: str) -> int | None:
    """``81559`` or ``81559 MiB``; None where nvidia-smi printed no figure (``[N/A]``, ``[Not Supported]``)."""
    if m := MIB_CELL.fullmatch(cell):
        return int(m.group(1))
    if cell.upper() == "N/A" or (cell.startswith("[") and cell.endswith("]")):
        return None
    raise FitError(f"cannot read {cell!r} in nvidia-smi output line {line!r} as MiB; pass --memory-mib")


def _smi_gpu(index: int, row: dict[str, str], line: str) -> dict[str, Any]:
    total = _smi_mib(row["memory.total"], line)
    used = _smi_mib(row["memory.used"], line) if "memory.used" in row else None
    free = _smi_mib(row["memory.free"], line) if "memory.free" in row else None
    gpu = f"GPU {row.get('index', index)}" + (f" ({row['name']})" if row.get("name") else "")
    if total is None:
        raise FitError(
            f"nvidia-smi reports no memory.total for {gpu} ({row['memory.total']}): a unified-memory GPU "
            "(DGX Spark GB10, Jetson) has no VRAM of its own, its pool is host RAM; pass --memory-mib with the "
            "RAM the server may use, or --backend cpu to measure host RAM"
        )
    if used is None and free is None:
        raise FitError(
            f"nvidia-smi reports memory.total but neither memory.used nor memory.free for {gpu}; pass --memory-mib"
        )
    used = total - free if used is None else used
    free = total - used if free is None else free
    out: dict[str, Any] = {"index": index, "total_mib": total, "used_mib": used, "free_mib": max(0, free)}
    return {**out, "description": row["name"]} if row.get("name") else out


def parse_nvidia_smi(text: str, fields: Sequence[str] = ("memory.total", "memory.used")) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]``, one GPU a line.

    Without a header the columns are ``fields`` (default: total, used, as ``--nvidia-smi-output`` documents);
    a header line (``--format=csv``) names them itself, so any field list that has memory.total and
    memory.used or memory.free is read. Free is ``memory.free`` where given (it leaves out the driver's
    reserved memory), else total - used.
    """
    header, rows = read_table(text, _smi_header)
    names = header or [f.lower() for f in fields]
    if "memory.total" not in names:
        raise FitError(
            f"nvidia-smi output has no memory.total column ({', '.join(names)}); query "
            "--query-gpu=memory.total,memory.used or pass --memory-mib"
        )
    gpus: list[dict[str, Any]] = []
    for line, cells in rows:
        if len(cells) != len(names):
            raise FitError(
                f"cannot read nvidia-smi output line {line!r}: {len(cells)} columns where "
                f"{len(names)} were expected ({', '.join(names)}); pass --memory-mib"
            )
        gpus.append(_smi_gpu(len(gpus), dict(zip(names, cells, strict=True)), line))
    if not gpus:
        raise FitError("nvidia-smi listed no GPU; check the driver (nvidia-smi -L) or pass --memory-mib")
    return gpus


def _card_number(key: str) -> int:
    """``card3`` -> 3; -1 for rocm-smi's other top-level keys (``system``)."""
    m = re.fullmatch(r"card(\d+)", key)
    return int(m.group(1)) if m else -1


def _rocm_bytes(card: str, values: dict[str, Any], key: re.Pattern[str]) -> int | None:
    raw = next((v for k, v in values.items() if key.fullmatch(k.strip())), None)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise FitError(f"rocm-smi reports {raw!r} for {card}'s VRAM, not a byte count; pass --memory-mib") from None


def parse_rocm_smi(text: str) -> list[dict[str, int]]:
    """Parse ``rocm-smi --showmeminfo vram --json`` (other --show* flags may add keys; ``system`` is skipped)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise FitError("cannot parse rocm-smi JSON output; pass --memory-mib") from None
    if not isinstance(data, dict):
        raise FitError("rocm-smi JSON is not an object keyed by card; pass --memory-mib")
    gpus = []
    for card in sorted((k for k in data if _card_number(k) >= 0 and isinstance(data[k], dict)), key=_card_number):
        total, used = _rocm_bytes(card, data[card], _ROCM_TOTAL), _rocm_bytes(card, data[card], _ROCM_USED)
        if total is None or used is None:
            continue
        gpus.append(
            {
                "index": len(gpus),
                "total_mib": total // MIB,
                "used_mib": used // MIB,
                "free_mib": max(0, total - used) // MIB,
            }
        )
    if not gpus:
        raise FitError("rocm-smi reported no VRAM figures; pass --memory-mib")
    return gpus


def _run(cmd: list[str]) -> str:
    if not shutil.which(cmd[0]):
        raise FitError(f"{cmd[0]} not found: the backend needs it to measure GPU memory; install the driver "
                       "tools or pass --memory-mib")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if run.returncode != 0:
        raise FitError(f"{' '.join(cmd)} failed ({run.returncode}): {run.stderr.strip()[-300:]}; "
                       "pass --memory-mib to skip the query")
    return run.stdout


def gpu_memory(gpus: list[dict[str, Any]], source: str, prefix: str = "") -> Memory:
    """GPU memory summed over ``gpus``; each keeps its own figures (the per-device fit), named ``<prefix><i>`` as
    ggml names the backend's devices (CUDA0, CUDA1) where the tool that listed them gave no name."""
    named = [{**g, "name": g.get("name") or f"{prefix}{i}"} if prefix or g.get("name") else dict(g)
             for i, g in enumerate(gpus)]
    return Memory("GPU", sum(g["free_mib"] for g in gpus) * MIB, sum(g["total_mib"] for g in gpus) * MIB,
                  source, named)


def devices_memory(backend: str, list_devices_output: str) -> Memory:
    """GPU memory of ``backend``'s devices from ``llama-server --list-devices`` (any GPU backend, e.g. Vulkan)."""
    try:
        devs = require_device(backend, parse_list_devices(list_devices_output), list_devices_output)
    except DeviceError as exc:
        raise FitError(f"{exc}; or pass --memory-mib") from None
    return gpu_memory([{"name": d.name, "description": d.description, "total_mib": d.total_mib,
                        "free_mib": d.free_mib} for d in devs], f"llama-server {LIST_DEVICES_FLAG}")


def parse_device_mib(text: str) -> list[dict[str, Any]]:
    """``CUDA0=32000,CUDA1=24000``: each device's free memory in MiB, as the operator gives it."""
    gpus: list[dict[str, Any]] = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        name, eq, mib = part.partition("=")
        try:
            value = float(mib) if eq else -1.0
        except ValueError:
            value = -1.0
        if not name.strip() or value < 0:
            raise FitError(f"--device-mib {text!r}: {part!r} is not NAME=MiB; give each device's free memory as "
                           f"llama-server {LIST_DEVICES_FLAG} names it (CUDA0=32000,CUDA1=24000)")
        if any(g["name"] == name.strip() for g in gpus):
            raise FitError(f"--device-mib {text!r}: {name.strip()} is given twice; give each device once")
        gpus.append({"name": name.strip(), "total_mib": int(value), "free_mib": int(value)})
    if not gpus:
        raise FitError("--device-mib names no device; give NAME=MiB for each (CUDA0=32000,CUDA1=24000)")
    return gpus


# how ggml names a backend's devices, where nvidia-smi or rocm-smi listed them by index
_SMI_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "hip": "ROCm"}


def measure_memory(backend: str, basis: str = "available", *, memory_mib: float | None = None,
                   nvidia_smi_output: str | None = None, list_devices_output: str | None = None,
                   device_mib: str | None = None) -> Memory:
    backend = backend.lower()
    kind = "GPU" if backend in GPU_BACKENDS or list_devices_output is not None else "host RAM"
    prefix = _SMI_PREFIX.get(backend, "CUDA")
    if device_mib is not None:
        return gpu_memory(parse_device_mib(device_mib), "given (--device-mib)")
    if memory_mib is not None:
        return Memory(kind, int(memory_mib * MIB), int(memory_mib * MIB), "given (--memory-mib)")
    if nvidia_smi_output is not None:
        return gpu_memory(parse_nvidia_smi(nvidia_smi_output), "nvidia-smi output given", prefix)
    if list_devices_output is not None:
        return devices_memory(backend, list_devices_output)
    if backend == "cuda":
        q = ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_FIELDS)}", "--format=csv,noheader,nounits"]
        return gpu_memory(parse_nvidia_smi(_run(q), NVIDIA_FIELDS), "nvidia-smi", prefix)
    if backend in ("rocm", "hip"):
        return gpu_memory(parse_rocm_smi(_run(["rocm-smi", "--showmeminfo", "vram", "--json"])), "rocm-smi", prefix)
    vm = psutil.virtual_memory()
    avail = vm.total if basis == "total" else vm.available
    return Memory("host RAM", int(avail), int(vm.total), f"psutil ({basis})")
