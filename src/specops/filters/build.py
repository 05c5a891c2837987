"""Filters for roles/llama_cpp's build (specops.buildopts): the same options, build id and command lines
`specops build` uses."""

from __future__ import annotations

from typing import Any

from specops import buildopts
from specops.buildopts import DEFAULT_CUDA_ARCHITECTURES, DEFAULT_HIP_TARGETS, BuildOptionError
from specops.deploycheck import truthy
from specops.filters import refused, strings


def cmake_options(backend: str, commit: str, cpu_flags: str | list[str] = "", cpu_isa: Any = "auto",
                  cuda_architectures: str = DEFAULT_CUDA_ARCHITECTURES, hip_targets: str = DEFAULT_HIP_TARGETS,
                  extra: dict[str, Any] | None = None, rpc: Any = False) -> dict[str, str]:
    with refused(BuildOptionError):
        return buildopts.cmake_options(backend, commit=commit, cpu_flags=cpu_flags, cpu_isa=cpu_isa,
                                       cuda_architectures=str(cuda_architectures), hip_targets=str(hip_targets),
                                       extra=dict(extra or {}), rpc=truthy(rpc))


def build_targets(targets: list[str], rpc: Any = False) -> list[str]:
    """``llama_cpp_targets``, and ``ggml-rpc-server`` when ``llama_cpp_rpc`` is on."""
    return buildopts.build_targets([str(t) for t in targets], truthy(rpc))


def build_id(options: dict[str, str], commit: str, backend: str, targets: list[str]) -> str:
    return buildopts.build_id(commit, backend, dict(options), list(targets))


def cmake_args(options: dict[str, str]) -> list[str]:
    return buildopts.cmake_args(dict(options))


def configure_argv(src_dir: str, build_dir: str, options: dict[str, str], backend: str, cuda_home: str | None = None,
                   ccache: bool = False, cuda_library_dirs: list[str] | None = None,
                   cuda_include_dirs: list[str] | None = None, bundle_libs: bool = False) -> list[str]:
    """The cmake configure argv, the same function `specops build` uses (nvcc is looked for on the controller,
    as the `is exists` test the role used before did)."""
    return buildopts.configure_argv(str(src_dir), str(build_dir), dict(options), backend=str(backend),
                                    cuda_home=None if cuda_home is None else str(cuda_home), ccache=bool(ccache),
                                    cuda_library_dirs=strings(cuda_library_dirs),
                                    cuda_include_dirs=strings(cuda_include_dirs), bundle_libs=bool(bundle_libs))


def compile_argv(build_dir: str, targets: list[str], jobs: int | str) -> list[str]:
    with refused(BuildOptionError):
        return buildopts.compile_argv(str(build_dir), [str(t) for t in targets], jobs)


FILTERS = {
    "specops_build_has_rpc": buildopts.has_rpc,
    "specops_cmake_options": cmake_options,
    "specops_build_id": build_id,
    "specops_build_targets": build_targets,
    "specops_cmake_args": cmake_args,
    "specops_configure_argv": configure_argv,
    "specops_compile_argv": compile_argv,
}
