"""Foundation: the role builds a real llama-server, and the lab runs it with a real model."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from specops.capabilities import parse_help
from specops.client import SPEC_ACCEPTED_TOKENS, SPEC_DRAFT_TOKENS, SPEC_DRAFTS, metric_value
from specops.profile import ServerProfile
from specops.server import ServerProcess
from tests import lab

pytestmark = pytest.mark.integration


def test_role_second_run_changes_nothing(llama_build):
    run = lab.build_llama_cpp()
    assert run.rc == 0, run.output[-3000:]
    recap = run.recap()
    assert recap.get("failed") == 0 and recap.get("changed") == 0, run.output[-3000:]


def test_install_is_self_contained_and_described(llama_build):
    info = llama_build.info
    assert info["commit"] == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert info["backend"] == "cpu" and info["cmake_options"]["GGML_NATIVE"] == "OFF"
    assert llama_build.prefix.name == info["build_id"]
    for name in ("llama-server", "llama-speculative", "llama-quantize", "llama-bench"):
        assert llama_build.bin(name).is_file()
    # statically linked against llama/ggml: no RUNPATH into a build dir
    ldd = subprocess.run(["ldd", str(llama_build.server)], capture_output=True, text=True, check=True).stdout
    assert "libllama" not in ldd and "libggml" not in ldd and "not found" not in ldd


def test_capabilities_come_from_the_real_binary(llama_build):
    caps = llama_build.caps
    assert caps.spec_era == "spec" and caps.has_metrics
    assert "draft-simple" in caps.spec_types and "ngram-mod" in caps.spec_types
    assert "--draft-max" in caps.removed_flags
    assert caps.commit and llama_build.info["commit"].startswith(caps.commit)
    # the same parser on freshly captured text gives the same answer
    help_text = subprocess.run([str(llama_build.server), "--help"], capture_output=True, text=True).stdout
    assert parse_help(help_text).flags == caps.flags


def test_greedy_completion_is_deterministic(start_server):
    server = start_server(spec_type="none")
    a = server.client.completion("The capital of France is", n_predict=24)
    b = server.client.completion("The capital of France is", n_predict=24)
    assert a["content"].strip() and a["content"] == b["content"]
    assert a["timings"]["predicted_n"] == 24
    assert "draft_n" not in a["timings"]


def test_draft_simple_moves_spec_counters(start_server, smollm):
    server = start_server(draft_model=str(smollm), draft_n_max=4)
    out = server.client.completion("Write the numbers from one to twenty:", n_predict=48)
    assert out["timings"].get("draft_n", 0) > 0
    samples = server.client.metrics()
    assert metric_value(samples, SPEC_DRAFT_TOKENS) > 0
    assert metric_value(samples, SPEC_DRAFTS) > 0
    assert metric_value(samples, SPEC_ACCEPTED_TOKENS) > 0  # the model drafting for itself agrees a lot
    assert server.client.slots()[0]["speculative"] is True


def test_draft_model_alone_is_a_silent_noop(llama_build, smollm, tmp_path):
    """The trap the argv builder exists for: `-md X` without `--spec-type` loads and never uses X."""
    profile = ServerProfile.from_dict({"model": str(smollm), "ctx_size": 2048, "threads": 1, "spec_type": "none"})
    server = ServerProcess(llama_build.server, profile, llama_build.caps, tmp_path / "md-alone.log")
    i = server.argv.index("--spec-type")
    del server.argv[i : i + 2]
    server.argv += ["-md", str(smollm)]  # what the original ticket's command line does
    with server:
        server.client.completion("Write the numbers from one to twenty:", n_predict=48)
        samples = server.client.metrics()
        assert (metric_value(samples, SPEC_DRAFT_TOKENS) or 0) == 0
        assert server.client.slots()[0]["speculative"] is False
    assert "loading draft model" in server.log_path.read_text()  # it *was* loaded


def test_removed_flag_kills_the_server(llama_build, smollm, tmp_path):
    proc = subprocess.run([str(llama_build.server), "-m", str(smollm), "--draft-max", "8", "--port", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "has been removed" in proc.stdout + proc.stderr


# ---- bad input to the build role: fails early, says what to do, builds nothing ----------------

def _fresh_root(tmp_path: Path) -> list[str]:
    return ["-e", f"llama_cpp_install_root={tmp_path / 'opt'}"]


def test_unknown_backend_fails_early(tmp_path):
    run = lab.ansible_playbook("playbooks/build.yml", *_fresh_root(tmp_path), "-e", "llama_cpp_backend=rocm")
    assert run.rc != 0
    assert "llama_cpp_backend" in run.text and "cpu, cuda, vulkan, hip, metal, sycl" in run.text
    assert not (tmp_path / "opt").exists()


@pytest.mark.parametrize("backend,missing", [("cuda", "cuBLAS"), ("hip", "hipcc"), ("sycl", "icpx")])
def test_missing_toolchain_fails_early(tmp_path, backend, missing):
    run = lab.ansible_playbook("playbooks/build.yml", *_fresh_root(tmp_path), "-e", f"llama_cpp_backend={backend}")
    assert run.rc != 0
    assert f"missing toolchain for backend {backend}" in run.text and missing in run.text
    assert not (tmp_path / "opt").exists()


def test_too_old_vulkan_headers_fail_early_when_no_newer_ones_are_pinned(tmp_path):
    run = lab.ansible_playbook("playbooks/build.yml", *_fresh_root(tmp_path), "-e", "llama_cpp_backend=vulkan",
                               "-e", "llama_cpp_vulkan_min_header_version=99999",
                               "-e", '{"llama_cpp_vulkan_headers_deb": {}}')
    assert run.rc != 0 and "missing toolchain for backend vulkan" in run.text
    assert "older than the 99999" in run.text and "llama_cpp_vulkan_headers_deb" in run.text
    assert not (tmp_path / "opt").exists()


def test_bad_source_checksum_fails_before_building(tmp_path):
    src = tmp_path / "llama.cpp-src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("project(fake)\n")
    archive = tmp_path / "llama.cpp.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="llama.cpp-src")
    fake_commit = "f" * 40
    run = lab.ansible_playbook(
        "playbooks/build.yml", *_fresh_root(tmp_path), "-e", "llama_cpp_source_type=archive",
        "-e", f"llama_cpp_archive_url={archive}", "-e", f"llama_cpp_archive_sha256={'0' * 64}",
        "-e", f"llama_cpp_commit={fake_commit}", "-e", f"llama_cpp_cache_dir={tmp_path / 'cache'}")
    assert run.rc != 0
    assert "Source checksum mismatch" in run.text and "Nothing was built" in run.text
    assert not (tmp_path / "opt").exists()
    assert not (tmp_path / "cache" / "src" / "llama.cpp-fffffffff").exists()
