"""`llama-server --list-devices` parsing and the no-device check (fixtures: tests/fixtures/devices/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.devices import DeviceError, device_problem, parse_list_devices, parse_run, require_device

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "devices"

NONE = "Available devices:\n  (none)\n"
TWO_CUDA = ("Available devices:\n  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23547 MiB free)\n"
            "  CUDA1: NVIDIA GeForce RTX 4090 (24080 MiB, 24010 MiB free)\n")


def test_parses_devices_with_memory_and_backend():
    devs = parse_list_devices(TWO_CUDA)
    assert [d.name for d in devs] == ["CUDA0", "CUDA1"]
    assert devs[0].description == "NVIDIA GeForce RTX 4090" and devs[0].total_mib == 24080
    assert devs[0].free_mib == 23547 and devs[0].backend == "cuda"
    assert require_device("cuda", devs) == devs


def test_none_listed_means_a_gpu_build_would_run_on_the_cpu():
    assert parse_list_devices(NONE) == []
    with pytest.raises(DeviceError, match=r"built for vulkan but finds no vulkan device.*silently run on the CPU"):
        require_device("vulkan", [], NONE)
    assert require_device("cpu", []) == []


def test_wrong_backend_device_does_not_count():
    with pytest.raises(DeviceError, match="devices it sees: CUDA0"):
        require_device("hip", parse_list_devices(TWO_CUDA), TWO_CUDA)


def test_the_reason_llama_cpp_gave_is_quoted():
    out = "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n" + NONE
    with pytest.raises(DeviceError, match="It said: ggml_cuda_init: failed to initialize CUDA"):
        require_device("cuda", parse_list_devices(out), out)


def test_missing_driver_library_is_named():
    text = ("llama-server: error while loading shared libraries: libcuda.so.1: cannot open shared object file: "
            "No such file or directory\n")
    with pytest.raises(DeviceError, match=r"libcuda.so.1 is not installed .*NVIDIA driver"):
        parse_run(text, 127)


def test_output_without_a_device_section_is_an_error():
    with pytest.raises(DeviceError, match="no 'Available devices:'"):
        parse_list_devices("error: invalid argument: --list-devices\n")


def test_ansible_filter_form():
    assert device_problem("cuda", TWO_CUDA, 0) == ""
    assert "finds no cuda device" in device_problem("cuda", NONE, 0)
    assert "exited 1" in device_problem("vulkan", "boom", 1)


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIX.glob("*.txt")))
def test_real_captures_parse(fixture):
    text = (FIX / fixture).read_text()
    backend = fixture.split("-")[0]
    if "none" in fixture:
        assert parse_list_devices(text) == [] and device_problem(backend, text, 0)
    else:
        assert require_device(backend, parse_list_devices(text), text)


def test_lavapipe_capture_is_one_vulkan_device():
    (dev,) = parse_list_devices((FIX / "vulkan-lavapipe.txt").read_text())
    assert (dev.name, dev.backend, dev.total_mib, dev.free_mib) == ("Vulkan0", "vulkan", 2048, 2048)
    assert dev.description == "llvmpipe (LLVM 15.0.6, 256 bits)"
