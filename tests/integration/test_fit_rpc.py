"""The per-device fit against llama.cpp's own buffers (issue 81 item 4): three placements of SmolLM2-135M as target
and draft over two real RPC devices, as llama-server logged them (tests/fixtures/rpc-buffers: recorded with
``scripts/rpc-fit-check``), against ``specops fit --json`` for the same flags: each device within 5%. The compute
buffer of a split counts the scheduler's copies of each split's inputs (pipeline parallelism), which the fit
models; without them the split's devices read 15% under."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops_lab import rpcfit

FIXTURES = Path(__file__).parents[1] / "fixtures" / "rpc-buffers"
FREE = "RPC0=24105,RPC1=24105"  # as the two ggml-rpc-server processes reported it (the logs' device list)


@pytest.fixture(scope="module")
def rows(smollm: Path) -> list[rpcfit.Row]:
    out: list[rpcfit.Row] = []
    for i, (name, args) in enumerate(rpcfit.PLACEMENTS.items()):
        log = (FIXTURES / f"smollm2-placement-{i}.log").read_text()
        out += rpcfit.compare(name, log, rpcfit.fit(smollm, smollm, [*rpcfit.COMMON, *args], FREE))
    return out


def test_each_device_of_three_placements_is_within_5_percent_of_llama_cpps_buffers(rows: list[rpcfit.Row]) -> None:
    assert len(rows) == 5  # two devices, two devices, one device
    bad = [r for r in rows if abs(r.error) > rpcfit.LIMIT]
    assert not bad, rpcfit.table(rows)


def test_the_fit_says_pipeline_parallelism_where_llama_cpp_turned_it_on(smollm: Path) -> None:
    """A split over two devices reserves more compute on each (llama.cpp logs "pipeline parallelism enabled"); one
    device does not: the fit's compute detail says so in the same placements."""
    for i, name in enumerate(rpcfit.PLACEMENTS):
        log = (FIXTURES / f"smollm2-placement-{i}.log").read_text()
        report = rpcfit.fit_report(smollm, smollm, [*rpcfit.COMMON, *rpcfit.PLACEMENTS[name]], FREE)
        details = " ".join(item["detail"] for d in report["per_device"] for item in d["items"]
                           if item["component"] == "target compute")
        assert ("pipeline parallelism enabled" in log) == ("pipeline parallelism" in details), (name, details)


def test_a_device_too_small_for_its_share_is_refused_naming_it(smollm: Path) -> None:
    """The refused placement first: the sum of the two devices fits, RPC1 (given 300 MiB) does not hold the draft
    and its half of the target; the one line names the device, what it would hold and what it has."""
    report = rpcfit.fit_report(smollm, smollm, [*rpcfit.COMMON, *rpcfit.PLACEMENTS["even split, draft on RPC1"]],
                               "RPC0=24105,RPC1=300")
    assert not report["fits"]
    assert report["refusal"] and report["refusal"].startswith("RPC1 would hold"), report["refusal"]
    assert "has 300 MiB free" in report["refusal"] and "the sum fits, this device does not" in report["refusal"]
