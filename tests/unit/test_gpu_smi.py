"""nvidia-smi / rocm-smi parsers fed real captured output.

Every fixture is a verbatim copy of output published elsewhere; tests/fixtures/gpu/README.md and
tests/fixtures/exporter/README.md name the source and the exact command of each. The numbers asserted
here are read off the captures by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.exporter.gpu import QUERY, parse_compute_apps
from specops.fit import MIB, FitError, measure_memory, parse_nvidia_smi, parse_rocm_smi

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GPU = FIX / "gpu"
EXPORTER = FIX / "exporter"

DEFAULT = ("memory.total", "memory.used")
# --query-gpu list of the enkore/i3pystatus#776 captures (--format=csv,noheader,nounits, so no header)
I3PYSTATUS = (
    "memory.total",
    "memory.free",
    "memory.used",
    "temperature.gpu",
    "fan.speed",
    "utilization.gpu",
    "utilization.memory",
)

# (fixture, --query-gpu fields for a capture without header, [(total, used, free) MiB per GPU])
NVIDIA_READABLE = [
    # --format=csv: header with units, 212 columns, memory.reserved between total and used
    ("nvidia-smi-query-gpu-full-h100-load.csv", DEFAULT, [(81559, 19818, 61263)]),
    ("nvidia-smi-query-gpu-2004mib-noheader-nounits.csv", I3PYSTATUS, [(2004, 0, 2004)]),
    ("nvidia-smi-query-gpu-2004mib-noheader-nounits-old-driver.csv", I3PYSTATUS, [(2004, 0, 2004)]),
]

# unified-memory GPUs (DGX Spark GB10): nvidia-smi prints [N/A] for every memory.* field
NVIDIA_UNIFIED = [
    ("nvidia-smi-query-gpu-gb10-header.csv", DEFAULT, "GPU 0 "),
    ("nvidia-smi-query-gpu-gb10-nvidia-docs.csv", DEFAULT, "GPU 0 (NVIDIA GB10)"),
    ("nvidia-smi-query-gpu-gb10-noheader.csv", ("memory.used", "memory.total", "utilization.memory"), "GPU 0 "),
]


@pytest.mark.parametrize(("name", "fields", "expected"), NVIDIA_READABLE, ids=[c[0] for c in NVIDIA_READABLE])
def test_nvidia_smi_capture(name: str, fields: tuple[str, ...], expected: list[tuple[int, int, int]]) -> None:
    gpus = parse_nvidia_smi((GPU / name).read_text(), fields)
    assert [(g["total_mib"], g["used_mib"], g["free_mib"]) for g in gpus] == expected
    assert [g["index"] for g in gpus] == list(range(len(expected)))


@pytest.mark.parametrize(("name", "fields", "gpu"), NVIDIA_UNIFIED, ids=[c[0] for c in NVIDIA_UNIFIED])
def test_nvidia_smi_unified_memory_says_what_to_do(name: str, fields: tuple[str, ...], gpu: str) -> None:
    with pytest.raises(FitError) as err:
        parse_nvidia_smi((GPU / name).read_text(), fields)
    message = str(err.value)
    assert gpu in message and "unified-memory GPU" in message
    assert "--memory-mib" in message and "host RAM" in message


def test_h100_free_is_memory_free_not_total_minus_used() -> None:
    """The capture's memory.reserved (479 MiB) is in neither used nor free: total - used would overstate."""
    (gpu,) = parse_nvidia_smi((GPU / "nvidia-smi-query-gpu-full-h100-load.csv").read_text())
    assert gpu["total_mib"] - gpu["used_mib"] == 61741
    assert gpu["free_mib"] == 61263


def test_header_capture_through_nvidia_smi_output() -> None:
    """--nvidia-smi-output accepts the --format=csv capture as printed (header, units) too."""
    text = (GPU / "nvidia-smi-query-gpu-full-h100-load.csv").read_text()
    mem = measure_memory("cuda", nvidia_smi_output=text)
    assert (mem.kind, mem.available, mem.total) == ("GPU", 61263 * MIB, 81559 * MIB)


def test_capture_with_unexpected_columns_is_refused_not_misread() -> None:
    """Read as (total, used) the 7-column capture once gave used = 2004 (its memory.free column)."""
    with pytest.raises(FitError, match="7 columns where 2 were expected"):
        parse_nvidia_smi((GPU / "nvidia-smi-query-gpu-2004mib-noheader-nounits.csv").read_text())


def test_header_without_memory_total_is_refused() -> None:
    """A GB10 capture of a query that never asked for memory.total."""
    with pytest.raises(FitError, match=r"no memory\.total column"):
        parse_nvidia_smi((GPU / "nvidia-smi-query-gpu-gb10-loop-no-total.csv").read_text())


ROCM = GPU / "rocm-smi-showmeminfo-vram-json-rx7900xt.json"


def test_rocm_smi_capture() -> None:
    # 21458059264 B total, 27856896 B used (Radeon RX 7900 XT, with --showproductname/--showuse keys)
    assert [(g["total_mib"], g["used_mib"], g["free_mib"]) for g in parse_rocm_smi(ROCM.read_text())] == [
        (20464, 26, 20437)
    ]


def test_rocm_smi_variants_built_from_the_capture() -> None:
    """Constructed, not captured: no real multi-card or ``system``-key JSON was found (see the README).

    rocm_smi.py (ROCm/rocm_smi_lib python_smi_tools) writes device-less lines under a ``system`` key, and
    names cards ``card<N>``; card10 must sort after card2.
    """
    card = json.loads(ROCM.read_text())["card0"]
    small = {**card, "VRAM Total Memory (B)": str(8 * 1024 * MIB), "VRAM Total Used Memory (B)": "0"}
    data = {"system": {"Driver version": "6.8.0"}, "card10": small, "card2": card}
    assert [g["total_mib"] for g in parse_rocm_smi(json.dumps(data))] == [20464, 8192]
    with pytest.raises(FitError, match="not a byte count"):
        parse_rocm_smi(json.dumps({"card0": {**card, "VRAM Total Used Memory (B)": "N/A"}}))
    with pytest.raises(FitError, match="not an object keyed by card"):
        parse_rocm_smi("[]")
    with pytest.raises(FitError, match="no VRAM figures"):
        parse_rocm_smi(json.dumps({"system": {"Driver version": "6.8.0"}}))


def test_exporter_query_is_unchanged() -> None:
    assert QUERY == ("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits")


def test_compute_apps_h100_capture() -> None:
    """--format=csv header (``used_gpu_memory [MiB]``), units in the cells, 8 columns."""
    rows = parse_compute_apps((EXPORTER / "nvidia_smi_compute_apps_h100_load.csv").read_text())
    assert [(r.pid, r.used_bytes // MIB) for r in rows] == [(11327, 2566), (11328, 1542), (11345, 15690)]
    assert {r.gpu_uuid for r in rows} == {"GPU-00000000-0000-0000-0000-000000000000"}


def test_compute_apps_windows_wddm_capture_has_no_figures() -> None:
    """Windows in WDDM mode: 19 processes, every used_gpu_memory is [N/A]; none may be counted."""
    text = (EXPORTER / "nvidia_smi_compute_apps_windows_wddm.csv").read_text()
    assert len(text.splitlines()) == 20
    assert parse_compute_apps(text) == []


def test_compute_apps_gb10_capture() -> None:
    """DGX Spark GB10 still reports per-process memory; the poster elided the UUID to ``GPU-...``."""
    text = (EXPORTER / "nvidia_smi_compute_apps_gb10_noheader.csv").read_text()
    rows = parse_compute_apps(text, ("gpu_uuid", "pid", "process_name", "used_memory"))
    assert [(r.pid, r.gpu_uuid, r.used_bytes // MIB) for r in rows] == [(114687, "GPU-...", 19135)]
    assert parse_compute_apps(text) == []  # read as pid,gpu_uuid,used_memory it has 4 columns, not 3
