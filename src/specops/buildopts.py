"""CMake options for a llama.cpp build: backend, CPU ISA, offline safety. One function, unit-tested.

``GGML_NATIVE`` is never turned on by default: on VMs the CPU flags advertise more than the
hypervisor allows and the native build dies with SIGILL (AMX kernels). Instead the ISA is spelled
out explicitly, by default from the build host's ``/proc/cpuinfo`` flags.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence

from specops.knobs import knob

BACKENDS = ("cpu", "cuda", "vulkan", "hip", "metal", "sycl")
DEFAULT_CUDA_ARCHITECTURES = "75;80;86;89;90"
DEFAULT_HIP_TARGETS = "gfx90a;gfx1030;gfx1100"
# llama.cpp's RPC backend (GGML_RPC): llama-server --rpc HOST:PORT adds the devices of a ggml-rpc-server process
# (tools/rpc at the pinned commit). Off by default: the server then takes no --rpc ("RPC not supported in this build").
RPC_OPTION = "GGML_RPC"
RPC_SERVER_TARGET = "ggml-rpc-server"

# cpuinfo flag -> GGML option. AMX and AVX512_BF16 are deliberately absent (see module docstring;
# AVX512_BF16 does not compile with GCC 12). They can still be forced through extra options.
ISA_FLAGS: dict[str, str] = {
    "sse4_2": "GGML_SSE42",
    "avx": "GGML_AVX",
    "avx2": "GGML_AVX2",
    "fma": "GGML_FMA",
    "f16c": "GGML_F16C",
    "bmi2": "GGML_BMI2",
    "avx_vnni": "GGML_AVX_VNNI",
    "avx512f": "GGML_AVX512",
    "avx512vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI",
}
# x86-64-v3: what a fleet of post-2015 x86 servers shares.
PORTABLE_ISA = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2")

COMMON: dict[str, str] = {
    "CMAKE_BUILD_TYPE": "Release",
    "BUILD_SHARED_LIBS": "OFF",  # binaries keep working after the build dir is gone
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "ON",  # llama-speculative, the reference implementation
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_BUILD_SERVER": "ON",
    "LLAMA_USE_PREBUILT_UI": "OFF",  # defaults ON and downloads the web UI
    "LLAMA_BUILD_UI": "OFF",
    "LLAMA_OPENSSL": "OFF",  # the server never downloads models in production
    "GGML_NATIVE": "OFF",
}

TOOLCHAINS: dict[str, list[tuple[str, str]]] = {
    # backend -> [(what, how to get it)]
    "cpu": [],
    "cuda": [("nvcc", "install the CUDA toolkit (nvcc) and put it on PATH or set llama_cpp_cuda_home"),
             ("cublas", "install cuBLAS (CUDA toolkit, or the nvidia-cublas PyPI wheel; "
                        "set llama_cpp_cuda_library_dirs)")],
    "vulkan": [("glslc", "apt-get install glslc"), ("vulkan-headers", "apt-get install libvulkan-dev"),
               ("spirv-headers", "apt-get install spirv-headers")],
    "hip": [("hipcc", "install ROCm (hipcc, rocBLAS, hipBLAS) and set llama_cpp_rocm_path")],
    "metal": [("macos", "Metal builds need macOS with Xcode command line tools")],
    "sycl": [("icpx", "install the Intel oneAPI Base Toolkit and source setvars.sh (icx/icpx)")],
}


class BuildOptionError(ValueError):
    pass


def isa_options(cpu_flags: list[str] | str, isa: str | list[str] = "auto") -> dict[str, str]:
    """ISA options: ``auto`` from the given cpuinfo flags, ``portable`` for x86-64-v3, or a list."""
    if isinstance(cpu_flags, str):
        cpu_flags = cpu_flags.replace("flags", " ").replace(":", " ").split()
    if isa == "auto":
        wanted = [f for f in ISA_FLAGS if f in set(cpu_flags)]
    elif isa == "portable":
        wanted = list(PORTABLE_ISA)
    elif isinstance(isa, list):
        unknown = [f for f in isa if f not in ISA_FLAGS]
        if unknown:
            raise BuildOptionError(f"unknown ISA feature(s) {unknown}; known: {sorted(ISA_FLAGS)}")
        wanted = list(isa)
    else:
        raise BuildOptionError(f"cpu_isa must be auto, portable or a list of features, got {isa!r}")
    return {opt: ("ON" if flag in wanted else "OFF") for flag, opt in ISA_FLAGS.items()}


# ggml-cuda compiles its FlashAttention kernels for these K-V cache type pairs only (GGML_CUDA_FA_QUANTS in
# ggml/CMakeLists.txt at the pinned commit). Any other pair still runs, but converts the whole KV cache to f16 at
# every step ("no FlashAttention vector kernel compiled for K/V types f16-q8_0 ... (slow)"): seen on the H100 with
# the service's own -ctv q8_0, reports/gpu-h100.md.
CUDA_FA_QUANTS = ("q4_0-q4_0", "q8_0-q8_0", "f16-f16", "bf16-bf16")


def deployed_kv_pair() -> str:
    """The K-V cache type pair a service deployed with our defaults runs (knob table): f16-q8_0."""
    return f"{knob('cache_type_k').effective_default}-{knob('cache_type_v').effective_default}"


def cuda_fa_quants(pairs: Sequence[str] = ()) -> str:
    """llama.cpp's default pairs, the deployed pair and any ``pairs`` asked for, as GGML_CUDA_FA_QUANTS."""
    return ";".join(dict.fromkeys([*CUDA_FA_QUANTS, deployed_kv_pair(), *pairs]))


def cmake_options(
    backend: str,
    *,
    commit: str,
    cpu_flags: list[str] | str = (),  # type: ignore[assignment]
    cpu_isa: str | list[str] = "auto",
    cuda_architectures: str = DEFAULT_CUDA_ARCHITECTURES,
    hip_targets: str = DEFAULT_HIP_TARGETS,
    extra: dict[str, str] | None = None,
    cuda_fa_kv: Sequence[str] = (),
    rpc: bool = False,
) -> dict[str, str]:
    """Every ``-D`` option for one build, sorted for a stable build id.

    ``cuda_fa_kv``: further K-V cache type pairs (``q8_0-q4_0``) whose FlashAttention kernels a CUDA build
    compiles, beyond llama.cpp's defaults and the pair the service deploys. ``rpc``: the RPC backend too
    (``GGML_RPC=ON``; absent otherwise, so a build without it keeps its build id)."""
    if backend not in BACKENDS:
        raise BuildOptionError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    opts = dict(COMMON)
    opts["LLAMA_BUILD_COMMIT"] = commit[:9]
    if backend != "metal":
        opts.update(isa_options(list(cpu_flags) if not isinstance(cpu_flags, str) else cpu_flags, cpu_isa))
    if backend == "cuda":
        opts.update({"GGML_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": cuda_architectures,
                     "GGML_CUDA_FA_QUANTS": cuda_fa_quants(cuda_fa_kv)})
    elif backend == "vulkan":
        opts["GGML_VULKAN"] = "ON"
    elif backend == "hip":
        opts.update({"GGML_HIP": "ON", "GPU_TARGETS": hip_targets})
    elif backend == "metal":
        opts.update({"GGML_METAL": "ON", "GGML_METAL_EMBED_LIBRARY": "ON"})
    elif backend == "sycl":
        opts.update({"GGML_SYCL": "ON", "CMAKE_C_COMPILER": "icx", "CMAKE_CXX_COMPILER": "icpx"})
    if rpc:
        opts[RPC_OPTION] = "ON"
    # Extra options win, including GGML_NATIVE=ON for those who explicitly ask for it.
    opts.update({str(k): str(v) for k, v in (extra or {}).items()})
    return dict(sorted(opts.items()))


def has_rpc(options: Mapping[str, object]) -> bool:
    """Does a build with these cmake ``options`` (as :func:`cmake_options` gives them, or the extra options laid over
    ``{"GGML_RPC": "ON"}`` where ``rpc`` is asked) carry the RPC backend?"""
    return str(options.get(RPC_OPTION, "OFF")).strip().upper() in ("ON", "1", "TRUE", "YES")


def build_targets(targets: Sequence[str], rpc: bool = False) -> list[str]:
    """The CMake targets a build compiles and installs into ``<prefix>/bin``: ``targets`` (each once, in order), and
    ``ggml-rpc-server`` with ``rpc``."""
    return list(dict.fromkeys([*(str(t) for t in targets), *([RPC_SERVER_TARGET] if rpc else [])]))


def build_id(commit: str, backend: str, options: dict[str, str], targets: list[str]) -> str:
    """``<commit9>-<backend>-<hash10>``: the same inputs always give the same install prefix."""
    digest = hashlib.sha256(json.dumps([commit, backend, options, sorted(targets)], sort_keys=True).encode())
    return f"{commit[:9]}-{backend}-{digest.hexdigest()[:10]}"


def cmake_args(options: dict[str, str]) -> list[str]:
    return [f"-D{k}={v}" for k, v in options.items()]


def cpu_flags_line(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The build host's first ``flags``/``Features`` line of /proc/cpuinfo ('' when unreadable): what the role
    reads with ``grep -m1 -E '^(flags|Features)' /proc/cpuinfo`` for ``cpu_isa: auto``."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            return next((line.rstrip("\n") for line in fh if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def configure_argv(
    src_dir: str,
    build_dir: str,
    options: dict[str, str],
    *,
    backend: str,
    cuda_home: str | None = None,
    ccache: bool = False,
    cuda_library_dirs: Sequence[str] = (),
    cuda_include_dirs: Sequence[str] = (),
    bundle_libs: bool = False,
) -> list[str]:
    """The ``cmake`` configure command line (the llama_cpp role's Configure task and ``specops build``).

    CUDA only: ``-DCMAKE_CUDA_COMPILER`` when ``<cuda_home>/bin/nvcc`` exists on this machine, ccache as CUDA
    launcher, the dirs holding cuBLAS (a toolkit from PyPI wheels) as library path and their headers as
    ``-I``, and a ``$ORIGIN/../lib`` RUNPATH when the CUDA libraries are bundled into the prefix.
    """
    argv = ["cmake", "-S", str(src_dir), "-B", str(build_dir), "-G", "Ninja", *cmake_args(options)]
    if ccache:
        argv += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    if backend != "cuda":
        return argv
    nvcc = f"{cuda_home}/bin/nvcc"
    if cuda_home is not None and os.path.exists(nvcc):
        argv.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    if ccache:
        argv.append("-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache")
    if cuda_library_dirs:
        argv.append("-DCMAKE_LIBRARY_PATH=" + ";".join(str(d) for d in cuda_library_dirs))
    if cuda_include_dirs:
        argv.append("-DCMAKE_CUDA_FLAGS=" + " ".join(f"-I{d}" for d in cuda_include_dirs))
    if bundle_libs:
        argv += ["-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib"]
    return argv


def compile_argv(build_dir: str, targets: Sequence[str], jobs: int | str) -> list[str]:
    """``cmake --build DIR -j N --target T...``."""
    try:
        n = int(jobs)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise BuildOptionError(f"jobs must be a positive whole number, got {jobs!r}")
    if not targets:
        raise BuildOptionError("no targets to build")
    return ["cmake", "--build", str(build_dir), "-j", str(n), "--target", *(str(t) for t in targets)]
