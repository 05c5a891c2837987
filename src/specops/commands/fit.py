"""``specops fit TARGET [DRAFT]``: do the models, their KV caches and compute buffers fit in memory?

On more than one GPU (nvidia-smi's, ``--devices-output``'s or ``--device-mib``'s devices) each device is checked
against its own free memory, with the placement the profile asks for (device, draft_device, tensor_split, split_mode,
main_gpu) or llama.cpp's default split and the draft on the device with the most room: the per-device table, and a
refusal naming the device that overflows.

Exit status: 0 fits, 1 does not fit (with the margin), 2 bad input (missing/invalid GGUF, bad option,
GPU memory that cannot be measured).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from specops.fit import (
    DEFAULT_MARGIN,
    FitError,
    FitParams,
    deployed,
    estimate,
    measure_memory,
    print_error,
    print_report,
    render,
    unset,
)
from specops.ggufmeta import GGUFError
from specops.knobs import LIST_DEVICES_FLAG, Knob, fit_knobs, uses_draft_model
from specops.profile import ProfileError, ServerProfile
from specops.tabbyapi import fitcli

NAME = "fit"
HELP = "estimate memory for target + draft (weights, KV, compute) and check it against RAM or GPU memory"
_PATHS = ("model", "draft_model")  # positional: the files on this machine


def options(k: Knob) -> list[str]:
    """A knob's options here: llama-server's own spellings at the pinned commit, then ``--<name>``."""
    return list(dict.fromkeys([*k.flags, "--" + k.name.replace("_", "-")]))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, help="target model GGUF")
    p.add_argument("draft", type=Path, nargs="?", help="draft model GGUF (optional)")
    p.add_argument("--profile", type=Path,
                   help="the service profile (YAML/JSON, the keys of `specops argv --profile`; - reads stdin): its "
                        "settings are the ones estimated (null: llama-server's own default); options given here "
                        "override it")
    for k in fit_knobs():
        if k.name in _PATHS:
            continue
        each = "".join(f", on {b} {v}" for b, v in k.backend_defaults)
        text = (f"{k.doc}; default: what the service deploys, {deployed(k.name)}{each} "
                f"(llama.cpp's: {k.llama_default})")
        if k.type == "bool":
            p.add_argument(*options(k), dest=k.name, action="store_true", default=None, help=text)
        else:
            p.add_argument(*options(k), dest=k.name, type=int if k.type == "int" else str,
                           choices=None if k.listed else k.choices or None,
                           metavar="N" if k.type == "int" else k.type.upper(),
                           help=text + (f"; {'each member' if k.listed else 'one'} of {', '.join(k.choices)}"
                                        if k.choices else ""))
    p.add_argument("--backend", default="cpu",
                   help="cpu (host RAM), cuda (nvidia-smi), rocm/hip (rocm-smi), vulkan/metal/... (host RAM "
                        "unless --memory-mib); default cpu")
    p.add_argument("--margin", default=DEFAULT_MARGIN,
                   help="headroom required: the largest of a comma list of N%% / N MiB|GiB "
                        f"(default {DEFAULT_MARGIN.replace('%', '%%')})")
    p.add_argument("--memory-basis", choices=("available", "total"), default="available",
                   help="host RAM: what is available now (default) or the total")
    p.add_argument("--memory-mib", type=float, help="check against this much memory instead of measuring "
                   "(e.g. the deploy host's, from Ansible facts)")
    p.add_argument("--nvidia-smi-output", help="nvidia-smi CSV (total, used) captured on the deploy host")
    p.add_argument("--device-mib", metavar="NAME=MIB,...",
                   help=f"each device's free memory in MiB, named as llama-server {LIST_DEVICES_FLAG} names them "
                        "(CUDA0=32000,CUDA1=24000): the per-device fit on those devices")
    p.add_argument("--devices-output", type=Path,
                   help=f"`llama-server {LIST_DEVICES_FLAG}` output captured on the deploy host: GPU memory of the "
                        "--backend's devices (works for vulkan, sycl, metal too)")
    p.add_argument("--json", action="store_true", help="machine-readable report on stdout")
    fitcli.add_arguments(p)


def fit_params(args: argparse.Namespace, profile: dict | None) -> FitParams:
    """Each fit knob: the option when given, else the profile's value, else what the service deploys.

    A profile's null is a flag the server is started without: llama-server's own default then (e.g. an
    unbounded 8192 MiB prompt cache, 3 drafted tokens), as argv renders it, except where llama.cpp decides at
    run time (context 0 = the model's, slots -1 = auto), which stay the service's."""
    values = {}
    for k in fit_knobs():
        if k.name in _PATHS:
            continue
        value = getattr(args, k.name)
        if value is None and profile is not None:
            value = profile.get(k.name)
            if value is None and k.name in profile:
                llama = unset(k.name)
                value = llama if llama not in (None, 0, -1) else None
        values[k.name] = _typed(k, k.deployed_for(args.backend) if value is None else value)
    values["flash_attn"] = values["flash_attn"] != "off"
    return FitParams(**values, margin=args.margin)


def _typed(k: Knob, value: object) -> object:
    """Profile values rendered by Ansible may arrive as text."""
    if k.type == "int":
        return int(str(value))
    if k.type == "bool" and not isinstance(value, bool):
        return str(value).lower() in ("true", "yes", "on", "1")
    return value


def _profile(path: Path | None) -> dict | None:
    """The profile's settings (validated like `specops argv` does), or None."""
    if path is None:
        return None
    data = yaml.safe_load(sys.stdin.read() if str(path) == "-" else path.read_text()) or {}
    return ServerProfile.from_dict({"model": "-", **data}).to_dict()


def run(args: argparse.Namespace) -> int:
    if args.engine == "tabbyapi":
        return fitcli.run(args)
    try:
        profile = _profile(args.profile)
        params = fit_params(args, profile)
        # a profile that deploys no draft model (no speculation, n-gram, draft-mtp) has none to count
        spec = None if profile is None else ServerProfile.from_dict(profile).effective_spec_type
        draft = args.draft if spec is None or uses_draft_model(spec) else None
        memory = measure_memory(args.backend, args.memory_basis, memory_mib=args.memory_mib,
                                nvidia_smi_output=args.nvidia_smi_output,
                                list_devices_output=args.devices_output.read_text() if args.devices_output else None,
                                device_mib=args.device_mib)
        report = estimate(args.target, draft, params, memory, per_device=True)
    except (FitError, GGUFError, ProfileError, OSError, ValueError, yaml.YAMLError) as exc:
        return print_error(exc, args.json)
    return print_report(report, render(report), args.json)
