"""Vulkan for real: compiled here, run on Mesa's lavapipe (a Vulkan device on the CPU), speculation included."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from specops.client import SPEC_ACCEPTED_TOKENS, SPEC_DRAFT_TOKENS, metric_value
from specops.devices import DeviceError, list_devices, require_device
from specops.profile import ServerProfile
from specops.server import ServerProcess
from specops.textdiff import first_difference
from tests.backends.conftest import build_backend

pytestmark = pytest.mark.integration

PROMPTS = ["Write the numbers from one to twenty:", "def fibonacci(n):", "The three primary colours are"]
# ggml-vulkan skips CPU-type Vulkan devices (lavapipe is one) unless they are named: the lab's only device is 0.
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}


@pytest.fixture(scope="module")
def vulkan_build():
    return build_backend("vulkan")


def _server(build, profile: dict, log: Path) -> ServerProcess:
    return ServerProcess(build.server, ServerProfile.from_dict({"ctx_size": 2048, "threads": 2, **profile}),
                         build.caps, log_path=log, env=LAVAPIPE)


def test_vulkan_build_is_installed_like_the_cpu_build(vulkan_build):
    assert vulkan_build.info["backend"] == "vulkan"
    assert vulkan_build.info["cmake_options"]["GGML_VULKAN"] == "ON"
    ldd = subprocess.run(["ldd", str(vulkan_build.server)], capture_output=True, text=True, check=True).stdout
    assert "libvulkan.so.1 => /" in ldd and "not found" not in ldd and "libggml" not in ldd
    assert vulkan_build.caps.spec_era == "spec" and "draft-simple" in vulkan_build.caps.spec_types


def test_a_software_device_alone_is_no_device_unless_named(vulkan_build):
    """ggml passes over CPU-type Vulkan devices by default: the build would silently run on the CPU. The device
    check says so, with the way out."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    devices, output = list_devices(vulkan_build.server, env=env)
    assert devices == [], output
    with pytest.raises(DeviceError, match="GGML_VK_VISIBLE_DEVICES"):
        require_device("vulkan", devices, output)


def test_lavapipe_is_listed_as_a_vulkan_device(vulkan_build):
    devices, output = list_devices(vulkan_build.server, env={**os.environ, **LAVAPIPE})
    mine = require_device("vulkan", devices, output)
    assert any("llvmpipe" in d.description for d in mine), output
    assert all(d.total_mib > 0 for d in mine)


# lavapipe is slow (0.3 tok/s for SmolLM2 on these 2 cores against 39 on the CPU backend): short generations.
N_PREDICT = 24
VK = {"model": None, "ngl": 99, "extra_args": ["-lv", "4"]}  # -lv 4: the load log names the device used


def _offloaded(log: str, models: int = 1) -> None:
    assert "using device Vulkan0 (llvmpipe" in log, log[-3000:]
    assert log.count("offloaded 31/31 layers to GPU") == models, log[-3000:]
    assert "Vulkan0 KV buffer size" in log, log[-3000:]


def test_speculation_runs_on_the_software_device(vulkan_build, smollm, tmp_path):
    """Target and draft both offloaded (-ngl 99, -ngld 99) to the Vulkan device, and the draft is used.

    One request per fresh server: on lavapipe (Mesa 22.3.6) with the cores busy, llama-server with speculation
    crashed (SIGSEGV) on the second request in 2 of 4 manual runs, and greedy text changed from request to request
    even without speculation (test_greedy_output_vulkan_vs_cpu reports it) - a finding recorded in the README."""
    profile = {**VK, "model": str(smollm), "draft_model": str(smollm), "draft_n_max": 4, "draft_ngl": 99}
    with _server(vulkan_build, profile, tmp_path / "vk-spec.log") as server:
        out = server.client.completion(PROMPTS[0], n_predict=N_PREDICT, cache_prompt=False)
        assert out["content"].strip()
        assert out["timings"].get("draft_n", 0) > 0
        samples = server.client.metrics()
        assert metric_value(samples, SPEC_DRAFT_TOKENS) > 0 and metric_value(samples, SPEC_ACCEPTED_TOKENS) > 0
        assert server.client.slots()[0]["speculative"] is True
    _offloaded((tmp_path / "vk-spec.log").read_text(), models=2)


def test_greedy_output_vulkan_vs_cpu(vulkan_build, llama_build, smollm, tmp_path, record_property):
    """Reported, not failed: first divergence from the CPU build per prompt, and whether the same request asked
    twice of one Vulkan server gives the same text. Asserted: both answer, and the Vulkan one runs on the device."""
    texts: dict[str, list[str]] = {}
    runs = {"cpu": (llama_build, {"model": str(smollm), "spec_type": "none"}),
            "vulkan": (vulkan_build, {**VK, "model": str(smollm), "spec_type": "none"})}
    for name, (build, profile) in runs.items():
        with _server(build, profile, tmp_path / f"{name}.log") as server:
            texts[name] = [server.client.completion(p, n_predict=N_PREDICT, cache_prompt=False)["content"]
                           for p in [*PROMPTS, PROMPTS[0]]]
        assert all(t.strip() for t in texts[name])
    _offloaded((tmp_path / "vulkan.log").read_text())
    assert texts["cpu"][0] == texts["cpu"][-1], "the CPU build must repeat itself"
    findings = []
    for prompt, c, v in zip(PROMPTS, texts["cpu"], texts["vulkan"], strict=False):
        pos = first_difference(c, v)
        where = "identical" if pos is None else f"diverges at char {pos}: {c[pos:pos + 20]!r} vs {v[pos:pos + 20]!r}"
        findings.append(f"{prompt!r}: {where}")
    again = first_difference(texts["vulkan"][0], texts["vulkan"][-1])
    findings.append("same request again on the Vulkan server: " + ("same text" if again is None else
                                                                  f"differs at char {again}"))
    record_property("vulkan_vs_cpu", findings)
    print("\nVulkan (lavapipe) vs CPU greedy output:\n  " + "\n  ".join(findings))
