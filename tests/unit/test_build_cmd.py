"""``specops build``: the cmake arguments are the llama_cpp role's (one function for both), bad input is one line,
and real cmake runs against toy projects: a broken one fails with the compiler's message and the cmake arguments in
one block, a working one lands in PREFIX/bin with build-info.json."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2.nativetypes import NativeEnvironment

from specops.buildopts import build_id, cmake_args, cmake_options, compile_argv, configure_argv
from specops.cli import main

REPO = Path(__file__).resolve().parents[2]
COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
PORTABLE = ["--cpu-isa", "portable"]  # the options do not depend on this host's /proc/cpuinfo

TOY_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(toy CXX)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
{body}
"""
GOOD_CPP = '#include <cstdio>\nint main() { std::puts(TOY_GREETING); return 0; }\n'
BROKEN_CPP = "int main() { return this_name_is_not_declared_anywhere; }\n"
needs_cmake = pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("ninja") and shutil.which("c++")),
                                 reason="needs cmake, ninja and c++")


def _plugin_filters() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("specops_filter_plugin", REPO / "plugins" / "filter" / "specops.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()  # type: ignore[no-any-return]


def _toy(root: Path, body: str, sources: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "CMakeLists.txt").write_text(TOY_CMAKE.replace("{body}", body))
    for name, text in sources.items():
        (root / name).write_text(text)
    return root


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("SPECOPS_CACHE", str(path))
    return path


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return _toy(tmp_path / "src", "add_executable(hello main.cpp)", {"main.cpp": GOOD_CPP})


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["build", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _dry(capsys: pytest.CaptureFixture[str], src: Path, *argv: str) -> dict[str, Any]:
    rc, out, err = _run(capsys, "--source", str(src), "--commit", COMMIT, "--no-ccache", "--dry-run", *argv)
    assert rc == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_dry_run_cpu_has_the_buildopts_options_and_creates_nothing(capsys, cache, src) -> None:
    plan = _dry(capsys, src, *PORTABLE)
    options = cmake_options("cpu", commit=COMMIT, cpu_isa="portable")
    bid = build_id(COMMIT, "cpu", options, ["llama-server", "llama-bench"])
    assert plan["build_id"] == bid
    assert plan["build_dir"] == str(cache / "build" / bid)
    assert plan["prefix"] == str(cache / "opt" / "llama.cpp" / bid)
    assert plan["configure"] == ["cmake", "-S", str(src), "-B", plan["build_dir"], "-G", "Ninja", *cmake_args(options)]
    assert "-DGGML_NATIVE=OFF" in plan["configure"] and "-DBUILD_SHARED_LIBS=OFF" in plan["configure"]
    assert plan["compile"] == compile_argv(plan["build_dir"], ["llama-server", "llama-bench"], os.cpu_count() or 1)
    assert plan["compile"][:3] == ["cmake", "--build", plan["build_dir"]]
    assert not cache.exists()


def test_dry_run_cuda_sm90(capsys, cache, src, tmp_path) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    plan = _dry(capsys, src, "--backend", "cuda", "--cuda-architectures", "90", "--cuda-home", str(cuda),
                "--cuda-library-dir", "/wheels/cublas/lib", *PORTABLE)
    options = cmake_options("cuda", commit=COMMIT, cpu_isa="portable", cuda_architectures="90")
    assert options["GGML_CUDA"] == "ON" and options["CMAKE_CUDA_ARCHITECTURES"] == "90"
    assert plan["configure"][7:7 + len(options)] == cmake_args(options)
    assert plan["configure"][7 + len(options):] == [f"-DCMAKE_CUDA_COMPILER={cuda}/bin/nvcc",
                                                    "-DCMAKE_LIBRARY_PATH=/wheels/cublas/lib"]
    assert plan["build_id"].startswith("0c1e57098-cuda-")
    default = _dry(capsys, src, "--backend", "cuda", "--cuda-home", str(tmp_path / "no-cuda"), *PORTABLE)
    assert "-DCMAKE_CUDA_ARCHITECTURES=75;80;86;89;90" in default["configure"]
    assert not any(a.startswith("-DCMAKE_CUDA_COMPILER=") for a in default["configure"])  # no nvcc there


def test_extra_wins_and_commit_comes_from_git(capsys, cache, src) -> None:
    plan = _dry(capsys, src, "--extra", "GGML_NATIVE=ON", "--extra", "TOY=a=b", *PORTABLE)
    assert "-DGGML_NATIVE=ON" in plan["configure"] and "-DTOY=a=b" in plan["configure"]
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "toy"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    rc, out, err = _run(capsys, "--source", str(src), "--dry-run", *PORTABLE)
    assert rc == 0, err
    assert json.loads(out)["build_id"].startswith(head[:9] + "-cpu-")


def test_the_role_and_the_command_configure_alike(capsys, cache, src, tmp_path) -> None:
    """The role's Configure and Compile tasks, rendered as Ansible would, give the command's argv."""
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    libs = ["/wheels/cublas/lib", "/wheels/cudart/lib"]
    plan = _dry(capsys, src, "--backend", "cuda", "--cuda-architectures", "90", "--cuda-home", str(cuda),
                "--jobs", "3", *[a for d in libs for a in ("--cuda-library-dir", d)], *PORTABLE)
    options = cmake_options("cuda", commit=COMMIT, cpu_isa="portable", cuda_architectures="90")
    filters = _plugin_filters()
    assert filters["specops_configure_argv"](str(src), plan["build_dir"], options, "cuda", str(cuda), False, libs,
                                             [], False) == plan["configure"]
    assert filters["specops_compile_argv"](plan["build_dir"], ["llama-server", "llama-bench"], "3") == plan["compile"]

    env = NativeEnvironment()
    env.filters.update(filters)
    env.filters["quote"] = shlex.quote
    tasks = {t["name"]: t for t in yaml.safe_load((REPO / "roles/llama_cpp/tasks/build.yml").read_text())[0]["block"]}
    role_vars = {"llama_cpp_src_dir": str(src), "llama_cpp_build_dir": plan["build_dir"], "llama_cpp_jobs": "3",
                 "llama_cpp_cmake_options": options, "llama_cpp_backend": "cuda", "llama_cpp_cuda_home": str(cuda),
                 "llama_cpp_ccache": False, "_llama_cpp_cuda_lib_dirs_all": libs, "llama_cpp_cuda_bundle_libs": False,
                 "llama_cpp_cache_dir": "/c", "llama_cpp_build_targets": ["llama-server", "llama-bench"]}
    configure = tasks["Configure (cmake)"]["ansible.builtin.command"]["argv"]
    assert env.from_string(configure).render(**role_vars) == plan["configure"]
    bundled = env.from_string(configure).render(**role_vars | {"llama_cpp_cuda_bundle_libs": True,
                                                                 "llama_cpp_ccache": True})
    assert bundled == configure_argv(str(src), plan["build_dir"], options, backend="cuda", cuda_home=str(cuda),
                                     ccache=True, cuda_library_dirs=libs, bundle_libs=True)
    assert bundled[-2:] == ["-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib"]
    compile_task = next(t for name, t in tasks.items() if name.startswith("Compile"))
    cmd = env.from_string(compile_task["ansible.builtin.script"]["cmd"]).render(**role_vars)
    assert cmd.endswith(" -- " + shlex.join(plan["compile"]))


def test_rpc_builds_the_backend_and_ggml_rpc_server(capsys, cache, src) -> None:
    """--rpc: GGML_RPC=ON and the ggml-rpc-server target, so another build id; without it neither."""
    plain = _dry(capsys, src, *PORTABLE)
    rpc = _dry(capsys, src, "--rpc", *PORTABLE)
    assert "-DGGML_RPC=ON" in rpc["configure"] and not any("GGML_RPC" in a for a in plain["configure"])
    assert rpc["compile"][-3:] == ["llama-server", "llama-bench", "ggml-rpc-server"]
    assert plain["compile"][-2:] == ["llama-server", "llama-bench"] and "ggml-rpc-server" not in plain["compile"]
    options = cmake_options("cpu", commit=COMMIT, cpu_isa="portable", rpc=True)
    assert rpc["build_id"] == build_id(COMMIT, "cpu", options, ["llama-server", "llama-bench", "ggml-rpc-server"])
    assert rpc["build_id"] != plain["build_id"] and rpc["prefix"] != plain["prefix"]
    again = _dry(capsys, src, "--rpc", "--targets", "llama-server", "ggml-rpc-server", *PORTABLE)
    assert again["compile"][-2:] == ["llama-server", "ggml-rpc-server"]  # named once


def test_the_role_builds_installs_and_ids_rpc_like_the_command(capsys, cache, src) -> None:
    """The role's preflight (llama_cpp_rpc: the options, the targets, the build id), rendered as Ansible would, gives
    the command's --rpc build; the install copies every built target, ggml-rpc-server among them, into <prefix>/bin."""
    filters = _plugin_filters()
    env = NativeEnvironment()
    env.filters.update(filters)
    env.filters["bool"] = lambda v: v is True or str(v).strip().lower() in ("true", "yes", "on", "1")
    env.filters["combine"] = lambda a, *b: {k: v for d in (a, *b) for k, v in d.items()}
    preflight = {t["name"]: t for t in yaml.safe_load((REPO / "roles/llama_cpp/tasks/preflight.yml").read_text())}
    defaults = yaml.safe_load((REPO / "roles/llama_cpp/defaults/main.yml").read_text())
    assert defaults["llama_cpp_rpc"] is False
    role_vars: dict[str, Any] = {
        "llama_cpp_backend": "cpu", "llama_cpp_commit": COMMIT, "_llama_cpp_cpuinfo": {"stdout": ""},
        "llama_cpp_cpu_isa": "portable", "llama_cpp_cuda_architectures": "90", "llama_cpp_hip_targets": "gfx90a",
        "_llama_cpp_cuda_driver": {}, "_llama_cpp_vulkan_include": "", "llama_cpp_extra_cmake_options": {},
        "llama_cpp_targets": ["llama-server", "llama-bench"]}

    def fact(task: str, name: str, **more: Any) -> Any:
        return env.from_string(preflight[task]["ansible.builtin.set_fact"][name]).render(**role_vars, **more)

    for rpc, argv in ((False, []), ("true", ["--rpc"])):  # a templated setting arrives as text
        plan = _dry(capsys, src, *argv, *PORTABLE)
        role_vars["llama_cpp_rpc"] = rpc
        options = fact("Compute CMake options (specops.buildopts, shared with the tests)", "llama_cpp_cmake_options")
        targets = fact("Targets to build and install", "llama_cpp_build_targets")
        assert targets == plan["compile"][plan["compile"].index("--target") + 1:]
        assert fact("Compute the build id and paths", "llama_cpp_build_id", llama_cpp_cmake_options=options,
                    llama_cpp_build_targets=targets) == plan["build_id"]
    build = {t["name"]: t for t in yaml.safe_load((REPO / "roles/llama_cpp/tasks/build.yml").read_text())[0]["block"]}
    install = build["Install the binaries"]
    assert install["loop"] == "{{ llama_cpp_build_targets }}"
    assert install["ansible.builtin.copy"]["dest"] == "{{ llama_cpp_prefix }}/bin/{{ item }}"
    assert "'targets': llama_cpp_build_targets" in (REPO / "roles/llama_cpp/templates/build-info.json.j2").read_text()


@pytest.mark.parametrize("argv,needle", [
    (["--source", "{missing}"], "no CMakeLists.txt"),
    (["--backend", "rocm"], "unknown backend 'rocm'"),
    (["--extra", "NOEQUALS"], "--extra 'NOEQUALS'"),
    (["--extra", "=x"], "KEY=VALUE"),
    (["--extra", "1BAD=x"], "KEY=VALUE"),
    (["--cpu-isa", "avx2,avx9000"], "unknown ISA"),
    (["--commit", "not-a-sha"], "not a hex commit"),
    (["--no-commit"], "not a git checkout"),
    (["--jobs", "0"], "--jobs must be at least 1"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(capsys, cache, src, tmp_path, argv, needle) -> None:
    args = ["--source", str(src), "--commit", COMMIT, "--prefix", str(tmp_path / "prefix"), "--no-ccache"]
    if argv == ["--no-commit"]:
        args, argv = args[:2], []
    argv = [a.replace("{missing}", str(tmp_path / "missing")) for a in argv]
    rc, out, err = _run(capsys, *args, *argv)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("specops build: ") and needle in err, err
    assert not cache.exists() and not (tmp_path / "prefix").exists()


def test_usage_errors_are_one_line(capsys, cache) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["build", "--backend", "cpu"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "--source" in err


def _real(capsys, src: Path, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    return _run(capsys, "--source", str(src), "--commit", COMMIT, "--no-ccache", "--jobs", "2", "--targets", "hello",
                "--build-dir", str(tmp_path / "build"), "--prefix", str(tmp_path / "prefix"), *PORTABLE, *argv)


@needs_cmake
def test_a_broken_compile_fails_with_the_compiler_message_and_the_cmake_args(capsys, tmp_path) -> None:
    src = _toy(tmp_path / "broken", "add_executable(hello broken.cpp)", {"broken.cpp": BROKEN_CPP})
    rc, out, err = _real(capsys, src, tmp_path)
    assert rc == 1 and out == ""
    block = err[err.index("specops build: compile FAILED"):]
    assert "this_name_is_not_declared_anywhere" in block and "error" in block  # the compiler's own words
    assert "--- cmake configure arguments ---" in block and "-DCMAKE_BUILD_TYPE=Release" in block
    assert f"-S {src} -B {tmp_path / 'build'} -G Ninja" in block and "-DLLAMA_BUILD_COMMIT=0c1e57098" in block
    assert err.count("specops build: compile FAILED") == 1 and err.count("--- cmake configure arguments ---") == 1
    assert not (tmp_path / "prefix" / "build-info.json").exists()


@needs_cmake
def test_a_failed_configure_fails_with_cmakes_message(capsys, tmp_path) -> None:
    src = _toy(tmp_path / "noconf", 'message(FATAL_ERROR "toy project refuses to configure")', {})
    rc, _, err = _real(capsys, src, tmp_path)
    assert rc == 1
    block = err[err.index("specops build: configure FAILED"):]
    assert "toy project refuses to configure" in block and "-DGGML_NATIVE=OFF" in block
    assert not (tmp_path / "prefix").exists()


@needs_cmake
def test_a_working_build_lands_in_the_prefix(capsys, tmp_path, src) -> None:
    body = 'add_executable(hello main.cpp)\ntarget_compile_definitions(hello PRIVATE TOY_GREETING="${TOY_GREETING}")'
    (src / "CMakeLists.txt").write_text(TOY_CMAKE.replace("{body}", body))
    rc, out, err = _real(capsys, src, tmp_path, "--extra", "TOY_GREETING=hi from the toy")
    assert rc == 0, err
    prefix = tmp_path / "prefix"
    assert out.strip() == str(prefix / "build-info.json")
    hello = prefix / "bin" / "hello"
    assert subprocess.run([str(hello)], capture_output=True, text=True, check=True).stdout == "hi from the toy\n"
    info = json.loads((prefix / "build-info.json").read_text())
    options = cmake_options("cpu", commit=COMMIT, cpu_isa="portable", extra={"TOY_GREETING": "hi from the toy"})
    assert info["build_id"] == build_id(COMMIT, "cpu", options, ["hello"])
    assert info["cmake_options"] == options and info["targets"] == ["hello"] and info["commit"] == COMMIT
    assert info["configure_argv"] == configure_argv(str(src), str(tmp_path / "build"), options, backend="cpu")
    assert info["configure_s"] >= 0 and info["compile_s"] >= 0 and info["compiler"]
    assert err.splitlines()[-1].startswith(f"specops build: {info['build_id']} in ")
    assert err.splitlines()[-1].endswith(f"s -> {prefix}")
    rc, out, err = _real(capsys, src, tmp_path, "--extra", "TOY_GREETING=hi from the toy")
    assert rc == 0 and "already installed" in err and out.strip() == str(prefix / "build-info.json")
