"""GPU-backend builds: long compiles, so they run from scripts/test-backends (SPECOPS_TEST_BACKENDS=1),
not in the default suite. Each backend is built through the real role into its own lab install root."""

from __future__ import annotations

import json
import os

import pytest

from tests import lab

ENABLED = os.environ.get("SPECOPS_TEST_BACKENDS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="GPU-backend compiles are long: run scripts/test-backends (SPECOPS_TEST_BACKENDS=1)")
    for item in items:
        if "tests/backends/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


def build_backend(backend: str, **extra_vars: object) -> lab.LlamaBuild:
    """Build ``backend`` through roles/llama_cpp (llama-server only) and return the install."""
    root = lab.backend_root(backend)
    run = lab.build_llama_cpp("-e", json.dumps({"llama_cpp_backend": backend, "llama_cpp_targets": ["llama-server"],
                                                **extra_vars}), root=root, timeout=3 * 3600)
    if run.rc != 0:
        pytest.fail(f"building the {backend} backend through roles/llama_cpp failed:\n{run.output[-6000:]}")
    return lab.installed_build(root)
