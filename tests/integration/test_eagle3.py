"""EAGLE-3 (issue 43): a tiny EAGLE-3 draft made for SmolLM2-135M from the pinned tree's definition
(tests/tiny_eagle3.py) loads in the real llama-server beside its target and drafts (``--spec-type draft-eagle3``:
drafted tokens counted, whatever the acceptance of random weights); and the first play's refusals, each one line:
a draft that is no EAGLE-3 model under draft-eagle3, an EAGLE-3 draft made for another target (its hidden size), an
EAGLE-3 draft under draft-simple."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from specops.profile import ServerProfile
from specops.room import eagle3_problems
from specops.server import ServerProcess
from tests import tiny_eagle3

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def eagle(smollm: Path, tmp_path_factory) -> Path:
    return tiny_eagle3.write(smollm, tmp_path_factory.mktemp("eagle3") / "tiny-eagle3.gguf")


def test_a_tiny_eagle3_draft_loads_beside_its_target_and_drafts(llama_build, smollm, eagle, tmp_path) -> None:
    profile = {"model": str(smollm), "draft_model": str(eagle), "spec_type": "draft-eagle3", "draft_n_max": 3,
               "ctx_size": 1024, "parallel": 1, "threads": 1}
    server = ServerProcess(llama_build.server, ServerProfile.from_dict(profile), llama_build.caps,
                           log_path=tmp_path / "llama-server.log")
    server.start()
    try:
        body = {"prompt": "alpha beta gamma delta alpha beta gamma delta", "n_predict": 24, "temperature": 0,
                "cache_prompt": False}
        r = httpx.post(server.base_url + "/completion", json=body, timeout=120)
        r.raise_for_status()
        timings = r.json().get("timings", {})
        log = server.log_path.read_text()
    finally:
        server.stop()
    assert "draft-eagle3" in log, log[-3000:]
    assert timings.get("draft_n", 0) > 0, (timings, log[-3000:])
    print(f"\nEAGLE3 | SmolLM2 + tiny EAGLE-3: {timings['draft_n']} drafted, "
          f"{timings.get('draft_n_accepted')} accepted")


def test_draft_eagle3_with_a_draft_that_is_no_eagle3_model_is_refused(smollm) -> None:
    (line,) = eagle3_problems("draft-eagle3", smollm, smollm)
    assert "draft-eagle3 needs an EAGLE-3 draft (architecture eagle3), but the draft" in line and "llama model" in line


def test_an_eagle3_draft_made_for_another_target_is_refused(smollm, tmp_path) -> None:
    wrong = tiny_eagle3.write(smollm, tmp_path / "wrong.gguf", target_hidden=4096)
    (line,) = eagle3_problems("draft-eagle3", smollm, wrong)
    assert "was made for another target" in line and "hidden states of size 4096" in line and "576" in line


def test_an_eagle3_draft_under_draft_simple_is_refused(smollm, eagle) -> None:
    for spec_type in ("draft-simple", "auto"):
        (line,) = eagle3_problems(spec_type, smollm, eagle)
        assert "is an EAGLE-3 model" in line and "draft-eagle3" in line
    assert eagle3_problems("draft-eagle3", smollm, eagle) == []
    assert eagle3_problems("ngram-mod", smollm, "") == []


def test_the_fit_of_an_eagle3_pair_matches_what_llama_server_allocates(llama_build, smollm, eagle, tmp_path) -> None:
    """specops fit for SmolLM2 + the tiny EAGLE-3 draft against the buffers llama-server reports (-lv 4): both KV
    caches exactly, with the compute and output buffers within 10%."""
    from specops.fit import MIB, FitParams, Memory, estimate
    from tests.integration.test_fit_real import reported_buffers

    profile = {"model": str(smollm), "draft_model": str(eagle), "spec_type": "draft-eagle3", "draft_n_max": 3,
               "ctx_size": 1024, "parallel": 1, "threads": 1}
    got = reported_buffers(llama_build, profile, tmp_path)
    r = estimate(smollm, eagle, FitParams(ctx_size=1024, spec_type="draft-eagle3", draft_n_max=3),
                 Memory("host RAM", 1 << 40, 1 << 40, "test"))
    items = {i.component: i.bytes / MIB for i in r.items}
    assert len(got["kv"]) == 2, got
    assert items["target KV cache"] == pytest.approx(got["kv"][0], abs=0.01)
    assert items["draft KV cache"] == pytest.approx(got["kv"][1], abs=0.01)
    reported = sum(sum(v) for v in got.values())
    estimated = sum(v for k, v in items.items() if k.endswith(("KV cache", "compute", "output buffers", "(EAGLE-3)")))
    assert estimated == pytest.approx(reported, rel=0.10), (got, items)
    print(f"\nFIT | SmolLM2 + tiny EAGLE-3: llama-server {reported:.2f} MiB of buffers {got}, specops fit "
          f"{estimated:.2f} MiB ({estimated / reported - 1:+.1%})")
