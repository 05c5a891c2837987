"""CUDA for real, up to what a GPU-less host allows: the role compiles GGML_CUDA=ON with nvcc and cuBLAS from
the pinned PyPI wheel, bundles the CUDA libraries, and the binary then fails cleanly here (no device), fast."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specops.devices import DeviceError, list_devices, require_device
from specops.server import free_port
from tests.backends.conftest import build_backend

pytestmark = pytest.mark.integration

CUBLAS = {"name": "nvidia-cublas", "version": "13.0.2.14",
          "sha256": "0cf238ffdbe46c00cb9aa98e7bca745c223a5ca5a53e686ac8b3e5a08fe80d6c"}
ARCH = "89"  # one architecture bounds the compile time; the role's default is a list


@pytest.fixture(scope="module")
def cuda_build():
    return build_backend("cuda", llama_cpp_cuda_architectures=ARCH, llama_cpp_cuda_pypi_wheels=[CUBLAS])


def _ldd(path) -> dict[str, str]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True).stdout
    return {parts[0]: parts[2] for parts in (line.split() for line in out.splitlines()) if len(parts) >= 3}


def test_cuda_build_links_its_bundled_libraries(cuda_build):
    opts = cuda_build.info["cmake_options"]
    assert opts["GGML_CUDA"] == "ON" and opts["CMAKE_CUDA_ARCHITECTURES"] == ARCH
    libs = _ldd(cuda_build.server)
    for name in ("libcublas.so.13", "libcudart.so.13"):
        assert name in libs, libs
        assert Path(libs[name]).resolve().parent == (cuda_build.prefix / "lib").resolve(), (name, libs[name])
    assert (cuda_build.prefix / "lib" / "libcublasLt.so.13").is_file()
    assert not [k for k, v in libs.items() if v == "not" and k != "libcuda.so.1"], libs
    dyn = subprocess.run(["readelf", "-d", str(cuda_build.server)], capture_output=True, text=True, check=True).stdout
    assert "$ORIGIN/../lib" in dyn


def test_no_cuda_device_is_a_clear_error_not_a_hang(cuda_build):
    try:
        devices, output = list_devices(cuda_build.server, timeout=120)
    except DeviceError as exc:  # a build that links libcuda directly cannot even start without the driver
        assert "NVIDIA driver" in str(exc)
        return
    assert "ggml_cuda_init" in output, output  # the CUDA backend is compiled in and says why it found nothing
    with pytest.raises(DeviceError, match="built for cuda but finds no cuda device"):
        require_device("cuda", devices, output)


def test_asking_for_the_gpu_fails_fast(cuda_build, smollm):
    proc = subprocess.run([str(cuda_build.server), "-m", str(smollm), "--device", "CUDA0", "-ngl", "99",
                           "--port", str(free_port())], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "CUDA0" in text or "libcuda" in text, text[-2000:]

