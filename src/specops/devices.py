"""The accelerator devices a llama-server build can use on this host, from ``llama-server --list-devices``.

A GPU build that finds no device does not fail: ggml quietly runs everything on the CPU. ``require_device``
turns that into an error before a service is deployed, naming the likely cause (driver, device nodes).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specops.knobs import LIST_DEVICES_FLAG

# ggml device-name prefixes per build backend (ggml-cuda built for HIP names its devices ROCm<N>)
DEVICE_PREFIXES: dict[str, tuple[str, ...]] = {
    "cuda": ("CUDA",),
    "vulkan": ("Vulkan",),
    "hip": ("ROCm", "HIP"),
    "sycl": ("SYCL",),
    "metal": ("MTL", "Metal"),
}
_LINE = re.compile(r"^\s+(?P<name>\S+): (?P<desc>.*) \((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$")
_HINTS: dict[str, str] = {
    "cuda": "install the NVIDIA driver (nvidia-smi must list the GPU) and check /dev/nvidia* exist",
    "hip": "install the amdgpu driver and ROCm runtime; /dev/kfd and /dev/dri/renderD* must exist",
    "vulkan": "install a Vulkan driver (mesa-vulkan-drivers, or the GPU vendor's ICD) and check "
              "`vulkaninfo --summary`; ggml skips CPU-type Vulkan devices (Mesa's lavapipe/llvmpipe) unless "
              "GGML_VK_VISIBLE_DEVICES names them (llama_server_environment: {GGML_VK_VISIBLE_DEVICES: '0'})",
    "sycl": "install the Intel GPU runtime (level-zero, intel-opencl-icd) and check `sycl-ls`",
    "metal": "Metal needs Apple silicon macOS",
}


class DeviceError(RuntimeError):
    pass


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    total_mib: int
    free_mib: int

    @property
    def backend(self) -> str | None:
        for backend, prefixes in DEVICE_PREFIXES.items():
            if any(self.name.startswith(p) for p in prefixes):
                return backend
        return None

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "backend": self.backend}


def parse_list_devices(text: str) -> list[Device]:
    """Devices listed under ``Available devices:`` (``(none)`` gives an empty list)."""
    if "Available devices:" not in text:
        raise DeviceError("no 'Available devices:' section in the llama-server output")
    section = text.split("Available devices:", 1)[1]
    return [Device(m["name"], m["desc"], int(m["total"]), int(m["free"]))
            for m in map(_LINE.match, section.splitlines()) if m]


def devices_argv(server_bin: Path | str) -> list[str]:
    """``llama-server --list-devices``'s argv (the service role runs it as well)."""
    return [str(server_bin), LIST_DEVICES_FLAG]


def list_devices(server_bin: Path | str, env: dict[str, str] | None = None,
                 timeout: float = 120) -> tuple[list[Device], str]:
    """Run ``llama-server --list-devices``; returns the devices and the full output (for diagnosis)."""
    try:
        proc = subprocess.run(devices_argv(server_bin), capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DeviceError(f"{server_bin} {LIST_DEVICES_FLAG} did not finish in {timeout:.0f} s (driver hang?)") from exc
    output = proc.stdout + proc.stderr
    return parse_run(output, proc.returncode, str(server_bin)), output


def parse_run(output: str, returncode: int, what: str = "llama-server") -> list[Device]:
    """Devices from a ``--list-devices`` run's output and exit status; names a missing library plainly."""
    if returncode != 0:
        missing = re.search(r"error while loading shared libraries: (\S+?):", output)
        if missing:
            lib = missing.group(1)
            hint = (" (the NVIDIA driver: install it, nvidia-smi must list the GPU)"
                    if lib.startswith("libcuda.so") else "")
            raise DeviceError(f"{what} cannot start on this host: {lib} is not installed{hint}")
        raise DeviceError(f"{what} {LIST_DEVICES_FLAG} exited {returncode}: {output.strip()[-500:]}")
    return parse_list_devices(output)


def require_device(backend: str, devices: list[Device], output: str = "") -> list[Device]:
    """The devices of ``backend``; a clear error when there are none (the build would silently use the CPU)."""
    if backend == "cpu":
        return []
    mine = [d for d in devices if d.backend == backend]
    if mine:
        return mine
    seen = ", ".join(f"{d.name} ({d.description})" for d in devices) or "none"
    why = [line.strip() for line in output.splitlines()
           if re.search(r"failed to initialize|no .*device|error", line, re.IGNORECASE)][:3]
    raise DeviceError(
        f"this llama-server was built for {backend} but finds no {backend} device on this host "
        f"(devices it sees: {seen}); it would silently run on the CPU. "
        + (f"It said: {' | '.join(why)}. " if why else "")
        + f"Fix: {_HINTS.get(backend, 'install the device driver')}."
    )


def device_problem(backend: str, output: str, returncode: int) -> str:
    """For Ansible: '' when a ``--list-devices`` run shows a device of ``backend``, else the error text."""
    try:
        require_device(backend, parse_run(output, returncode), output)
    except DeviceError as exc:
        return str(exc)
    return ""


def run_problem(run: Mapping[str, Any], backend: str) -> str:
    """:func:`device_problem` of a registered ``--list-devices`` result (Ansible's ``rc``, ``stdout``, ``stderr``)."""
    output = str(run.get("stdout", "")) + "\n" + str(run.get("stderr", ""))
    return device_problem(backend, output, int(run.get("rc", 0)))
