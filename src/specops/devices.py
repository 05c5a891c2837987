"""The accelerator devices a llama-server build can use on this host, from ``llama-server --list-devices``.

A GPU build that finds no device does not fail: ggml quietly runs everything on the CPU. ``require_device``
turns that into an error before a service is deployed, naming the likely cause (driver, device nodes).

The placement settings (the knob table's :data:`specops.knobs.PLACEMENT`: the target's devices, the draft's, the
tensor split, the split mode, the main GPU) are read and checked here, in llama.cpp's syntax (common/arg.cpp at
0c1e57098: a device list is comma-separated names or ``none``; a split is proportions separated by ``,`` or ``/``):
:func:`placement_problem` says in one line what is wrong with them, against the devices a build lists where those are
known (``specops fit``), else on their own (the profile, the first play's input checks).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specops.knobs import LIST_DEVICES_FLAG, PLACEMENT, knob

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


# ---- placement settings ---------------------------------------------------------------------------------------------
NO_DEVICE = "none"  # a device list of llama.cpp's: don't offload
_SPLIT_SEP = re.compile(r"[,/]+")  # --tensor-split's separators (common/arg.cpp)


def device_list(value: object) -> tuple[str, ...] | None:
    """A device setting as llama.cpp reads it: None when unset, () for ``none``, else the names in order."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    names = tuple(n.strip() for n in str(value).split(","))
    return () if names == (NO_DEVICE,) else names


def split_parts(value: object) -> tuple[float, ...] | None:
    """A tensor split's proportions (None when unset); ValueError naming the part that is no proportion."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError("not a comma-separated list of proportions")
    parts: list[float] = []
    for part in _SPLIT_SEP.split(value.strip()):
        try:
            number = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(f"{part!r} is not a finite number")
        if number < 0:
            raise ValueError(f"{part} is negative")
        parts.append(number)
    if not any(parts):
        raise ValueError("every part is 0, which gives no device a share")
    return tuple(parts)


def placement_set(settings: Mapping[str, Any]) -> list[str]:
    """The placement settings given (not left to llama.cpp), by knob name; llama.cpp's own default (split mode
    layer, main GPU 0) and ``none`` device lists count as not asking for a device."""
    found = []
    for name in PLACEMENT:
        value = settings.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if str(value).strip() == str(knob(name).llama_default):
            continue
        if name in ("device", "draft_device") and device_list(value) == ():
            continue
        found.append(name)
    return found


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) or "none"


def placement_problem(settings: Mapping[str, Any], listed: Sequence[str] | None = None,
                      var: Callable[[str], str] = lambda name: name, source: str = "") -> str | None:
    """The first problem with the placement settings (knob name -> value) in one line, naming the setting as
    ``var`` spells it (a role variable, a knob name), or None. ``listed``: the names of the devices the build lists
    (``source`` says where from), None where they are not known (only what the settings say on their own is checked
    then): each named device must be one of them, a split must give one part per device, none may be negative,
    ``main_gpu`` must index a device, and a build that lists none takes no placement setting."""
    where = f" ({source})" if source else ""

    def head(name: str) -> str:
        return f"{var(name)}={settings.get(name)!r}"

    for name in ("device", "draft_device"):
        names = device_list(settings.get(name))
        if names and any(not n for n in names):
            return (f"{head(name)}: an empty device name; list the devices as llama-server {LIST_DEVICES_FLAG} names "
                    "them, comma-separated (CUDA0,CUDA1), or none")
        if names and NO_DEVICE in names:
            return f"{head(name)}: none stands alone (no offload); list device names or write none by itself"
    try:
        split = split_parts(settings.get("tensor_split"))
    except ValueError as exc:
        return f"{head('tensor_split')}: {exc}; give one proportion of 0 or more per device, comma-separated (3,1)"
    main_gpu = settings.get("main_gpu")
    if main_gpu is not None and (isinstance(main_gpu, bool) or not str(main_gpu).strip().lstrip("+").isdigit()):
        return f"{head('main_gpu')}: not a device index; give 0 or more (the index into {var('device')})"
    given = placement_set(settings)
    if listed is not None and not listed and given:
        return (f"{head(given[0])}: this build lists no device{where}, so there is nothing to place the models on; "
                f"drop the placement settings ({', '.join(var(n) for n in given)}) or deploy a GPU build")
    target = device_list(settings.get("device"))
    if listed is not None:
        for name in ("device", "draft_device"):
            unknown = [n for n in device_list(settings.get(name)) or () if n not in listed]
            if unknown:
                whose = "the draft's" if name == "draft_device" else "the target's"
                return (f"{head(name)}: {_names(unknown)} {'is' if len(unknown) == 1 else 'are'} not among the devices "
                        f"this build lists{where}: {_names(listed)}; name {whose} devices from those")
    devices = target if target is not None else (tuple(listed) if listed is not None else None)
    if split is not None and devices is not None:
        if not devices:
            return f"{head('tensor_split')}: {var('device')} is none, so there is no device to split the target over"
        if len(split) != len(devices):
            return (f"{head('tensor_split')}: {len(split)} part{'s' if len(split) != 1 else ''} for the "
                    f"{len(devices)} device{'s' if len(devices) != 1 else ''} of the target ({_names(devices)}); "
                    "give one proportion per device, in that order")
    mode = settings.get("split_mode")
    if main_gpu is not None and devices is not None and mode in ("none", "row") and int(main_gpu) >= len(devices):
        return (f"{head('main_gpu')}: the target has {len(devices)} device{'s' if len(devices) != 1 else ''} "
                f"({_names(devices)}), so {var('main_gpu')} is one of 0..{max(len(devices) - 1, 0)}")
    return None
