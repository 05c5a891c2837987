"""``specops devices``: the accelerator devices a llama-server build finds here; fail when its backend has none."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specops.devices import DeviceError, list_devices, parse_list_devices, require_device
from specops.knobs import LIST_DEVICES_FLAG

NAME = "devices"
HELP = f"list the GPU devices llama-server sees ({LIST_DEVICES_FLAG}); --backend X fails when X has none"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--binary", help="path to llama-server")
    src.add_argument("--output-file", type=Path, help=f"saved `llama-server {LIST_DEVICES_FLAG}` output")
    p.add_argument("--backend", help="require at least one device of this build backend (cuda, vulkan, hip, ...)")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    try:
        if args.binary:
            devices, output = list_devices(args.binary)
        else:
            output = args.output_file.read_text()
            devices = parse_list_devices(output)
        if args.backend:
            require_device(args.backend, devices, output)
    except DeviceError as exc:
        print(f"specops devices: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
    else:
        for d in devices:
            print(f"{d.name}\t{d.backend or '?'}\t{d.total_mib} MiB\t{d.free_mib} MiB free\t{d.description}")
        if not devices:
            print("(no accelerator devices: llama-server runs on the CPU)")
    return 0
