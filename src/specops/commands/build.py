"""``specops build``: configure, compile and install llama.cpp without Ansible (cmake, ninja, a C++ compiler and,
for CUDA, nvcc). The cmake arguments are those of the llama_cpp role: both come from :mod:`specops.buildopts`.

Exit status: 0 built (or already installed), 1 the configure or the compile failed (one block on stderr with the
failing step, the end of its output and the full cmake arguments), 2 bad input (nothing created).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from specops.buildopts import (
    BACKENDS,
    DEFAULT_CUDA_ARCHITECTURES,
    RPC_SERVER_TARGET,
    BuildOptionError,
    build_id,
    build_targets,
    cmake_options,
    compile_argv,
    configure_argv,
    cpu_flags_line,
)
from specops.paths import cache_dir

NAME = "build"
HELP = "build llama.cpp from a source tree without Ansible (the llama_cpp role's cmake options), install to a prefix"
DEFAULT_TARGETS = ["llama-server", "llama-bench"]
TAIL = 60
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


class BuildInputError(ValueError):
    pass


class StepFailed(RuntimeError):
    def __init__(self, step: str, rc: int, tail: list[str], log: Path) -> None:
        super().__init__(step)
        self.step, self.rc, self.tail, self.log = step, rc, tail, log


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True, type=Path, metavar="DIR", help="an extracted llama.cpp source tree")
    p.add_argument("--backend", default="cpu", help=f"one of {', '.join(BACKENDS)} (default cpu)")
    p.add_argument("--commit", help="llama.cpp commit (default: git -C SOURCE rev-parse HEAD)")
    p.add_argument("--cuda-architectures", default=DEFAULT_CUDA_ARCHITECTURES,
                   help=f"CMAKE_CUDA_ARCHITECTURES (default {DEFAULT_CUDA_ARCHITECTURES})")
    p.add_argument("--cpu-isa", default="auto",
                   help="auto (this host's /proc/cpuinfo), portable (x86-64-v3) or a comma list (avx2,fma,...)")
    p.add_argument("--extra", action="append", default=[], metavar="KEY=VALUE",
                   help="extra cmake option, wins over the computed ones (repeatable)")
    p.add_argument("--targets", nargs="+", default=list(DEFAULT_TARGETS), metavar="TARGET",
                   help=f"binaries to build and install (default {' '.join(DEFAULT_TARGETS)})")
    p.add_argument("--rpc", action="store_true",
                   help=f"llama.cpp's RPC backend too (GGML_RPC=ON: llama-server takes --rpc HOST:PORT) and the "
                        f"{RPC_SERVER_TARGET} binary; it has no authentication, keep it on loopback")
    p.add_argument("--build-dir", type=Path, help="default $SPECOPS_CACHE/build/<build-id>")
    p.add_argument("--prefix", type=Path, help="default $SPECOPS_CACHE/opt/llama.cpp/<build-id>")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compile jobs (default: CPUs)")
    p.add_argument("--cuda-home", default="/usr/local/cuda", help="CUDA toolkit (default /usr/local/cuda)")
    p.add_argument("--cuda-library-dir", action="append", default=[], metavar="DIR",
                   help="a dir holding libcublas.so outside the toolkit (repeatable)")
    p.add_argument("--cuda-include-dir", action="append", default=[], metavar="DIR",
                   help="a dir holding cublas_v2.h outside the toolkit (repeatable)")
    p.add_argument("--no-ccache", action="store_true", help="do not use ccache even when it is on PATH")
    p.add_argument("--force", action="store_true", help="rebuild even when PREFIX/build-info.json exists")
    p.add_argument("--dry-run", action="store_true", help="print the configure and compile argv as JSON, run nothing")


def _extra(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _KEY.match(key):
            raise BuildInputError(f"--extra {item!r}: expected KEY=VALUE with KEY a cmake variable name")
        out[key] = value
    return out


def _isa(value: str) -> str | list[str]:
    return value if value in ("auto", "portable") else [f.strip() for f in value.split(",") if f.strip()]


def _commit(source: Path, given: str | None) -> str:
    if given:
        if not re.fullmatch(r"[0-9a-f]{7,40}", given):
            raise BuildInputError(f"--commit {given!r} is not a hex commit id")
        return given
    try:
        out = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildInputError(f"no --commit and git rev-parse failed in {source}: {exc}") from exc
    if out.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}", out.stdout.strip()):
        raise BuildInputError(f"no --commit given and {source} is not a git checkout (pass --commit SHA)")
    return out.stdout.strip()


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the build does, computed from the arguments alone (raises BuildInputError/BuildOptionError)."""
    source = args.source.expanduser().resolve()
    if not (source / "CMakeLists.txt").is_file():
        raise BuildInputError(f"--source {args.source}: no CMakeLists.txt there (an extracted llama.cpp tree?)")
    if args.backend not in BACKENDS:
        raise BuildInputError(f"unknown backend {args.backend!r}; choose one of {', '.join(BACKENDS)}")
    if args.jobs < 1:
        raise BuildInputError(f"--jobs must be at least 1, got {args.jobs}")
    extra = _extra(args.extra)
    commit = _commit(source, args.commit)
    options = cmake_options(args.backend, commit=commit, cpu_flags=cpu_flags_line(), cpu_isa=_isa(args.cpu_isa),
                            cuda_architectures=args.cuda_architectures, extra=extra, rpc=args.rpc)
    targets = build_targets(args.targets, args.rpc)
    bid = build_id(commit, args.backend, options, targets)
    build_dir = (args.build_dir or cache_dir() / "build" / bid).expanduser().resolve()
    prefix = (args.prefix or cache_dir() / "opt" / "llama.cpp" / bid).expanduser().resolve()
    ccache = not args.no_ccache and shutil.which("ccache") is not None
    cuda_libs = [str(Path(d).expanduser()) for d in args.cuda_library_dir]
    configure = configure_argv(str(source), str(build_dir), options, backend=args.backend, cuda_home=args.cuda_home,
                               ccache=ccache, cuda_library_dirs=cuda_libs,
                               cuda_include_dirs=[str(Path(d).expanduser()) for d in args.cuda_include_dir])
    return {"build_id": bid, "backend": args.backend, "commit": commit, "cmake_options": options,
            "targets": targets, "source": str(source), "build_dir": str(build_dir), "prefix": str(prefix),
            "configure": configure, "compile": compile_argv(str(build_dir), targets, args.jobs),
            "jobs": args.jobs, "cuda_home": args.cuda_home, "cuda_library_dirs": cuda_libs}


def _env(p: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    if p["backend"] == "cuda":
        env["PATH"] = f"{env.get('PATH', '')}:{p['cuda_home']}/bin"
        if p["cuda_library_dirs"]:
            env["LIBRARY_PATH"] = ":".join([*p["cuda_library_dirs"], *filter(None, [env.get("LIBRARY_PATH")])])
    return env


def _toolchain_problem(p: dict[str, Any], env: dict[str, str]) -> str:
    tools = [("cmake", "apt-get install cmake"), ("ninja", "apt-get install ninja-build"),
             ("c++", "apt-get install g++")]
    if p["backend"] == "cuda":
        tools.append(("nvcc", "install the CUDA toolkit (nvcc) or pass --cuda-home"))
    missing = [f"{tool} ({hint})" for tool, hint in tools if not shutil.which(tool, path=env["PATH"])]
    return "not on PATH: " + ", ".join(missing) if missing else ""


def _say(msg: str) -> None:
    print(f"specops build: {msg}", file=sys.stderr, flush=True)


def _run_step(step: str, argv: list[str], env: dict[str, str], log: Path, every: float = 15.0) -> float:
    """Run ``argv`` (output to ``log``), print ninja's progress every ``every`` s; seconds taken or StepFailed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL)
    t0 = last = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                                errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            tail.append(line.rstrip("\n"))
            now = time.monotonic()
            m = _STEP.match(line)
            if m and now - last >= every:
                last = now
                _say(f"{step} [{m.group(1)}/{m.group(2)}] {now - t0:.0f}s")
        rc = proc.wait()
    if rc != 0:
        raise StepFailed(step, rc, list(tail), log)
    return time.monotonic() - t0


def _version_line(argv: list[str], env: dict[str, str], last: bool = False) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return (lines[-1] if last else lines[0]) if lines else ""


def _failure(exc: StepFailed, p: dict[str, Any]) -> str:
    return "\n".join([
        f"specops build: {exc.step} FAILED (exit {exc.rc}) for {p['build_id']}",
        f"--- last {len(exc.tail)} lines of the {exc.step} output (all of it: {exc.log}) ---",
        *exc.tail,
        "--- cmake configure arguments ---",
        shlex.join(p["configure"]),
        "--- compile command ---",
        shlex.join(p["compile"]),
        f"--- end of the {exc.step} failure ---",
    ])


def build(p: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    build_dir, prefix = Path(p["build_dir"]), Path(p["prefix"])
    _say(f"configure {p['build_id']} ({p['backend']}) in {build_dir}")
    configure_s = _run_step("configure", p["configure"], env, build_dir / "specops-configure.log")
    _say(f"compile {' '.join(p['targets'])} with {p['jobs']} jobs (configure took {configure_s:.0f}s)")
    compile_s = _run_step("compile", p["compile"], env, build_dir / "specops-compile.log")
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    for target in p["targets"]:
        built = next((c for c in (build_dir / "bin" / target, build_dir / target) if c.is_file()), None)
        if built is None:
            raise StepFailed("install", 1, [f"the compile succeeded but {build_dir}/bin/{target} is missing"],
                             build_dir / "specops-compile.log")
        shutil.copy2(built, prefix / "bin" / target)
    info = {key: p[key] for key in ("build_id", "backend", "commit", "cmake_options", "targets", "source")} | {
        "configure_argv": p["configure"], "configure_s": round(configure_s, 1), "compile_s": round(compile_s, 1),
        "compiler": _version_line(["c++", "--version"], env),  # as in the role's build-info.json
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if p["backend"] == "cuda":
        nvcc = Path(p["cuda_home"]) / "bin" / "nvcc"
        info["nvcc"] = _version_line([str(nvcc) if nvcc.exists() else "nvcc", "--version"], env, last=True)
    return info


def run(args: argparse.Namespace) -> int:
    try:
        p = plan(args)
    except (BuildInputError, BuildOptionError) as exc:
        _say(str(exc))
        return 2
    if args.dry_run:
        print(json.dumps({key: p[key] for key in ("build_id", "build_dir", "prefix", "configure", "compile")},
                         indent=2))
        return 0
    info_path = Path(p["prefix"]) / "build-info.json"
    if info_path.exists() and not args.force:
        _say(f"{p['build_id']} already installed -> {p['prefix']} (--force rebuilds)")
        print(info_path)
        return 0
    env = _env(p)
    problem = _toolchain_problem(p, env)
    if problem:
        _say(problem)
        return 2
    t0 = time.monotonic()
    try:
        info = build(p, env)
    except StepFailed as exc:
        print(_failure(exc, p), file=sys.stderr, flush=True)
        return 1
    except OSError as exc:
        _say(f"install into {p['prefix']} failed: {exc}")
        return 1
    tmp = info_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, info_path)  # last: its presence marks a complete install
    _say(f"{p['build_id']} in {time.monotonic() - t0:.0f}s -> {p['prefix']}")
    print(info_path)
    return 0
