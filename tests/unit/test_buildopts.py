import pytest

from specops.buildopts import (
    RPC_SERVER_TARGET,
    BuildOptionError,
    build_id,
    build_targets,
    cmake_args,
    cmake_options,
    isa_options,
)

COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
EPYC = "flags : fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2"
SAPPHIRE = EPYC + " avx512f avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16 avx_vnni"


def test_never_native_and_offline_safe():
    opts = cmake_options("cpu", commit=COMMIT, cpu_flags=EPYC)
    assert opts["GGML_NATIVE"] == "OFF"
    assert opts["LLAMA_USE_PREBUILT_UI"] == "OFF" and opts["LLAMA_OPENSSL"] == "OFF"
    assert opts["BUILD_SHARED_LIBS"] == "OFF"
    assert opts["LLAMA_BUILD_COMMIT"] == "0c1e57098"


def test_isa_auto_follows_cpuinfo_and_skips_amx_and_bf16():
    opts = isa_options(SAPPHIRE)
    assert opts["GGML_AVX512"] == "ON" and opts["GGML_AVX512_VNNI"] == "ON"
    assert "GGML_AMX_TILE" not in opts and "GGML_AVX512_BF16" not in opts
    small = isa_options(EPYC)
    assert small["GGML_AVX2"] == "ON" and small["GGML_AVX512"] == "OFF"


def test_isa_portable_and_explicit():
    assert isa_options(SAPPHIRE, "portable")["GGML_AVX512"] == "OFF"
    assert isa_options("", ["avx2", "fma"])["GGML_AVX2"] == "ON"
    with pytest.raises(BuildOptionError, match="unknown ISA"):
        isa_options("", ["avx9000"])


@pytest.mark.parametrize("backend,expected", [
    ("cuda", {"GGML_CUDA": "ON", "CMAKE_CUDA_ARCHITECTURES": "75;80;86;89;90"}),
    ("vulkan", {"GGML_VULKAN": "ON"}),
    ("hip", {"GGML_HIP": "ON", "GPU_TARGETS": "gfx90a;gfx1030;gfx1100"}),
    ("metal", {"GGML_METAL": "ON", "GGML_METAL_EMBED_LIBRARY": "ON"}),
    ("sycl", {"GGML_SYCL": "ON", "CMAKE_CXX_COMPILER": "icpx"}),
])
def test_backends_map_to_cmake(backend, expected):
    opts = cmake_options(backend, commit=COMMIT, cpu_flags=EPYC)
    for key, value in expected.items():
        assert opts[key] == value
    assert "GGML_AVX2" not in opts if backend == "metal" else opts["GGML_AVX2"] == "ON"


def test_unknown_backend():
    with pytest.raises(BuildOptionError, match="unknown backend 'rocm'"):
        cmake_options("rocm", commit=COMMIT)


def test_build_id_is_stable_and_sensitive():
    a = cmake_options("cpu", commit=COMMIT, cpu_flags=EPYC)
    assert build_id(COMMIT, "cpu", a, ["llama-server"]) == build_id(COMMIT, "cpu", dict(a), ["llama-server"])
    b = cmake_options("cpu", commit=COMMIT, cpu_flags=SAPPHIRE)
    assert build_id(COMMIT, "cpu", a, ["llama-server"]) != build_id(COMMIT, "cpu", b, ["llama-server"])
    assert build_id(COMMIT, "cpu", a, ["llama-server"]).startswith("0c1e57098-cpu-")
    assert "-DGGML_NATIVE=OFF" in cmake_args(a)


def test_extra_options_win():
    assert cmake_options("cpu", commit=COMMIT, extra={"GGML_NATIVE": "ON"})["GGML_NATIVE"] == "ON"


@pytest.mark.parametrize("backend", ["cpu", "cuda", "vulkan"])
def test_rpc_adds_the_backend_and_the_server_target(backend):
    plain = cmake_options(backend, commit=COMMIT, cpu_flags=EPYC)
    rpc = cmake_options(backend, commit=COMMIT, cpu_flags=EPYC, rpc=True)
    assert "GGML_RPC" not in plain and "-DGGML_RPC=ON" in cmake_args(rpc)
    assert {k: v for k, v in rpc.items() if k != "GGML_RPC"} == plain
    targets = ["llama-server", "llama-bench"]
    assert build_targets(targets) == targets == build_targets(targets, rpc=False)
    assert build_targets(targets, rpc=True) == ["llama-server", "llama-bench", RPC_SERVER_TARGET] == [
        "llama-server", "llama-bench", "ggml-rpc-server"]
    assert build_targets([*targets, RPC_SERVER_TARGET], rpc=True).count(RPC_SERVER_TARGET) == 1


def test_rpc_changes_the_build_id_only_when_on():
    targets = ["llama-server", "llama-bench"]
    before = build_id(COMMIT, "cpu", cmake_options("cpu", commit=COMMIT, cpu_flags=EPYC), targets)
    off = build_id(COMMIT, "cpu", cmake_options("cpu", commit=COMMIT, cpu_flags=EPYC, rpc=False),
                   build_targets(targets, rpc=False))
    on = build_id(COMMIT, "cpu", cmake_options("cpu", commit=COMMIT, cpu_flags=EPYC, rpc=True),
                  build_targets(targets, rpc=True))
    assert off == before and on != before and on.startswith("0c1e57098-cpu-")
    # the extra options still win: GGML_RPC=OFF there builds no RPC backend
    assert cmake_options("cpu", commit=COMMIT, rpc=True, extra={"GGML_RPC": "OFF"})["GGML_RPC"] == "OFF"


def test_has_rpc_reads_ggml_rpc_as_the_build_does():
    """One reading for the role's result and the first play's check: the extra options win over llama_cpp_rpc."""
    from specops.buildopts import has_rpc

    assert has_rpc(cmake_options("cpu", commit=COMMIT, rpc=True))
    assert not has_rpc(cmake_options("cpu", commit=COMMIT))
    assert has_rpc({"GGML_RPC": "on"}) and has_rpc({"GGML_RPC": 1}) and not has_rpc({"GGML_RPC": "OFF"})
    assert not has_rpc(cmake_options("cpu", commit=COMMIT, rpc=True, extra={"GGML_RPC": "OFF"}))
