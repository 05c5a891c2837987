"""The per-device fit against llama.cpp's own buffers on two real devices (issue 81 item 4): two ``ggml-rpc-server``
processes on loopback make two devices of one CPU machine; llama-server loads the target and the draft over them in
three placements and logs, per device, the model, KV and compute buffers it allocated (at ``-lv 4``); ``specops fit
--json`` gives its per-device figure for the same flags. Lab equipment: it runs a build made with ``llama_cpp_rpc``.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.devices import parse_list_devices
from specops_lab.labhost import tcp_open

PORTS = (50052, 50053)
# the flags both llama-server and specops fit take: the service's own cache types (f16/q8_0 needs flash attention)
COMMON = ("-c", "4096", "-np", "1", "-fa", "on", "-ctk", "f16", "-ctv", "q8_0", "-ngl", "99", "-ngld", "99")
# the three: an even split; an uneven split with the draft on the device holding fewer layers; one device
PLACEMENTS: dict[str, tuple[str, ...]] = {
    "even split, draft on RPC1": ("--device", "RPC0,RPC1", "-ts", "1,1", "-devd", "RPC1"),
    "3:1 split, draft on RPC1 (the smaller share)": ("--device", "RPC0,RPC1", "-ts", "3,1", "-devd", "RPC1"),
    "everything on RPC0": ("--device", "RPC0", "-devd", "RPC0"),
}
LIMIT = 0.05  # the issue's: the fit's per-device figure within 5% of llama.cpp's lines

# `common_param:   - RPC1    : 127.0.0.1:50053 (24105 MiB, 24105 MiB free)`: the device list the server logs first
_DEVICE = re.compile(r"common_param:\s+- (RPC\d+)\s*: (\S+) \(")
# `load_tensors: RPC0[127.0.0.1:50053] model buffer size = 373.71 MiB`, `llama_kv_cache: ... KV buffer size`,
# `sched_reserve: ... compute buffer size` (an RPC device is named by its server's own index and endpoint there)
_BUFFER = re.compile(r"(load_tensors|llama_kv_cache|sched_reserve): (RPC\d+)\[(\S+)\] (model|KV|compute) buffer "
                     r"size = +([\d.]+) MiB")


@dataclass(frozen=True)
class Row:
    placement: str
    device: str
    logged: float  # MiB, llama.cpp's lines
    fit: float  # MiB, specops fit's figure for the device (its needed, without the margin)

    @property
    def error(self) -> float:
        return self.fit / self.logged - 1


def logged(log: str) -> dict[str, float]:
    """Per device (as --list-devices names it), the MiB of every model, KV and compute buffer llama-server logged
    for it, the target's and the draft's contexts together."""
    names = {endpoint: name for name, endpoint in _DEVICE.findall(log)}
    out: dict[str, float] = {}
    for _, _, endpoint, _, mib in _BUFFER.findall(log):
        if endpoint not in names:
            raise ValueError(f"buffer on RPC endpoint {endpoint} that the log's device list does not name")
        out[names[endpoint]] = out.get(names[endpoint], 0.0) + float(mib)
    if not out:
        raise ValueError("no RPC buffer line in the log: was it written at -lv 4 by a build with RPC?")
    return out


def fit_report(target: Path, draft: Path, args: Sequence[str], device_mib: str) -> dict[str, Any]:
    """``specops fit --json`` (the real command) on llama-server's flags, against ``device_mib``."""
    cmd = [sys.executable, "-m", "specops", "fit", str(target), str(draft), *_fit_args(args), "--device-mib",
           device_mib, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"specops fit failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def fit(target: Path, draft: Path, args: Sequence[str], device_mib: str) -> dict[str, float]:
    """Per device the fit uses, what it would hold (MiB, no margin)."""
    report = fit_report(target, draft, args, device_mib)
    return {d["name"]: float(d["needed_mib"]) for d in report["per_device"] if d["needed_mib"] > 0}


def _fit_args(args: Sequence[str]) -> list[str]:
    """llama-server's short flags as specops fit spells them."""
    spell = {"-c": "--ctx-size", "-np": "--parallel", "-fa": "--flash-attn", "-ctk": "--cache-type-k",
             "-ctv": "--cache-type-v", "-ngl": "--gpu-layers", "-ngld": "--spec-draft-ngl", "-ts": "--tensor-split",
             "-devd": "--spec-draft-device"}
    return [spell.get(a, a) for a in args]


def compare(placement: str, log: str, fitted: dict[str, float]) -> list[Row]:
    got = logged(log)
    if set(got) != set(fitted):
        raise AssertionError(f"{placement}: llama.cpp used {sorted(got)}, the fit {sorted(fitted)}")
    return [Row(placement, name, got[name], fitted[name]) for name in sorted(got)]


@contextlib.contextmanager
def rpc_servers(prefix: Path, ports: Sequence[int] = PORTS) -> Iterator[str]:
    """Two ``ggml-rpc-server`` processes bound to 127.0.0.1 (rpc-server has no authentication), one thread each;
    yields the ``--rpc`` value; stopped on exit."""
    procs = [subprocess.Popen([str(prefix / "bin" / "ggml-rpc-server"), "--host", "127.0.0.1", "--port", str(p)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in ports]
    try:
        deadline = time.monotonic() + 30
        for port in ports:  # listening before llama-server's --rpc connects (it gives up at once)
            while not tcp_open("127.0.0.1", port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ggml-rpc-server on 127.0.0.1:{port} not listening after 30 s")
                time.sleep(0.2)
        yield ",".join(f"127.0.0.1:{p}" for p in ports)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def free_mib(prefix: Path, rpc: str) -> str:
    """``--device-mib`` for the RPC devices, from ``llama-server --rpc ... --list-devices`` (each device's free MiB as
    its server reports it)."""
    out = subprocess.run([str(prefix / "bin" / "llama-server"), "--rpc", rpc, "--list-devices"], capture_output=True,
                         text=True, check=False, timeout=120)
    found = [d for d in parse_list_devices(out.stdout + out.stderr) if d.name.startswith("RPC")]
    if len(found) != len(rpc.split(",")):
        raise RuntimeError(f"llama-server --rpc {rpc} --list-devices listed {found}: {out.stderr.strip()[-500:]}")
    return ",".join(f"{d.name}={d.free_mib}" for d in found)


def load_log(prefix: Path, target: Path, draft: Path, rpc: str, args: Sequence[str], port: int,
             timeout: float = 300) -> str:
    """Start llama-server with the pair over the RPC devices at ``-lv 4``, wait until it listens (every buffer
    allocated), stop it; its log."""
    cmd = [str(prefix / "bin" / "llama-server"), "-m", str(target), "-md", str(draft), "--rpc", rpc, *COMMON, *args,
           "-t", "1", "-lv", "4", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "listening on" in line or time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = "".join(lines)
    if "listening on" not in text:
        raise RuntimeError(f"llama-server did not load the pair ({' '.join(args)}): {text[-2000:]}")
    return text


def table(rows: Sequence[Row]) -> str:
    out = ["| placement | device | llama.cpp's buffers (MiB) | specops fit (MiB) | fit ÷ logged |",
           "| --- | --- | ---: | ---: | ---: |"]
    out += [f"| {r.placement} | {r.device} | {r.logged:,.2f} | {r.fit:,.2f} | {r.error:+.1%} |" for r in rows]
    return "\n".join(out)
