"""Vulkan for real: compiled here, run on Mesa's lavapipe (a Vulkan device on the CPU), speculation included."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specops.client import SPEC_ACCEPTED_TOKENS, SPEC_DRAFT_TOKENS, metric_value
from specops.devices import list_devices, require_device
from specops.profile import ServerProfile
from specops.server import ServerProcess
from specops.textdiff import first_difference
from tests.backends.conftest import build_backend

pytestmark = pytest.mark.integration

PROMPTS = ["Write the numbers from one to twenty:", "def fibonacci(n):", "The three primary colours are"]


@pytest.fixture(scope="module")
def vulkan_build():
    return build_backend("vulkan")


def _server(build, profile: dict, log: Path) -> ServerProcess:
    return ServerProcess(build.server, ServerProfile.from_dict({"ctx_size": 2048, "threads": 2, **profile}),
                         build.caps, log_path=log)


def test_vulkan_build_is_installed_like_the_cpu_build(vulkan_build):
    assert vulkan_build.info["backend"] == "vulkan"
    assert vulkan_build.info["cmake_options"]["GGML_VULKAN"] == "ON"
    ldd = subprocess.run(["ldd", str(vulkan_build.server)], capture_output=True, text=True, check=True).stdout
    assert "libvulkan.so.1 => /" in ldd and "not found" not in ldd and "libggml" not in ldd
    assert vulkan_build.caps.spec_era == "spec" and "draft-simple" in vulkan_build.caps.spec_types


def test_lavapipe_is_listed_as_a_vulkan_device(vulkan_build):
    devices, output = list_devices(vulkan_build.server)
    mine = require_device("vulkan", devices, output)
    assert any("llvmpipe" in d.description for d in mine), output
    assert all(d.total_mib > 0 for d in mine)


def test_speculation_runs_on_the_software_device(vulkan_build, smollm, tmp_path):
    """Target and draft both offloaded (-ngl 99, -ngld 99) to the Vulkan device; the draft must be used."""
    profile = {"model": str(smollm), "draft_model": str(smollm), "draft_n_max": 4, "ngl": 99, "draft_ngl": 99}
    with _server(vulkan_build, profile, tmp_path / "vk-spec.log") as server:
        out = server.client.completion(PROMPTS[0], n_predict=48)
        assert out["content"].strip()
        assert out["timings"].get("draft_n", 0) > 0
        samples = server.client.metrics()
        assert metric_value(samples, SPEC_DRAFT_TOKENS) > 0 and metric_value(samples, SPEC_ACCEPTED_TOKENS) > 0
        assert server.client.slots()[0]["speculative"] is True
    log = (tmp_path / "vk-spec.log").read_text()
    assert "Vulkan0" in log, log[-3000:]
    assert "offloaded" in log and "layers to GPU" in log, log[-3000:]


def test_greedy_output_vulkan_vs_cpu(vulkan_build, llama_build, smollm, tmp_path, record_property):
    """Different kernels may flip near-ties: a divergence is reported (as a finding), not failed. What must hold:
    each build is deterministic with itself, and speculation on Vulkan reproduces Vulkan's own baseline."""
    texts: dict[str, list[str]] = {}
    runs = {
        "cpu": (llama_build, {"model": str(smollm), "spec_type": "none"}),
        "vulkan": (vulkan_build, {"model": str(smollm), "spec_type": "none", "ngl": 99}),
        "vulkan-again": (vulkan_build, {"model": str(smollm), "spec_type": "none", "ngl": 99}),
    }
    for name, (build, profile) in runs.items():
        with _server(build, profile, tmp_path / f"{name}.log") as server:
            texts[name] = [server.client.completion(p, n_predict=64, cache_prompt=False)["content"] for p in PROMPTS]
    assert texts["vulkan"] == texts["vulkan-again"]
    findings = []
    for prompt, cpu, vk in zip(PROMPTS, texts["cpu"], texts["vulkan"], strict=True):
        pos = first_difference(cpu, vk)
        findings.append(f"{prompt!r}: " + ("identical" if pos is None else f"diverges at char {pos}"))
    record_property("vulkan_vs_cpu", findings)
    print("\nVulkan (lavapipe) vs CPU greedy output:\n  " + "\n  ".join(findings))
