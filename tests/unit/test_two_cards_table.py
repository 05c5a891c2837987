"""The seed's pair of cards, on paper (issue 81 item 5): the README's "Two devices" table is what `specops fit` says
for the synthetic pairs on a 32 GB and a 24 GB card (scripts/two-cards-table, lab/specops_lab/twocards.py); it fails
when the table is stale, and checks that the default placements fit every card and that the refused one is refused."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specops.fit import ModelShape
from specops.ggufmeta import read
from specops_lab import twocards

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("two-cards")


@pytest.fixture(scope="module")
def results(models: Path) -> list[twocards.Result]:
    return twocards.run_all(models)


def script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("two_cards_table", str(ROOT / "scripts" / "two-cards-table"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


def test_the_readme_table_is_current(results):
    text = twocards.README.read_text()
    assert twocards.replace_section(text, twocards.table(results)) == text, \
        "README.md's two-cards table is stale: run scripts/two-cards-table --update"


def test_the_default_placements_fit_every_card(results):
    defaults = [r for r in results if not r.case.settings]
    assert len(defaults) == 2
    for r in defaults:
        assert r.status == 0 and r.fits, r.result_line
        rows = {row["name"]: row for row in r.report["per_device"]}
        assert all(row["fits"] for row in rows.values())
        place = r.report["placement"]
        # the target split as llama.cpp splits it by default: by each card's free MiB, over both cards
        assert place["tensor_split"] == "32000,24000" and "tensor_split" in place["chosen"]
        assert all(any(i["component"] == "target layers" for i in row["items"]) for row in rows.values())
        # the draft on the card with the most room after the target: the 32 GB one
        assert place["draft_devices"] == ["CUDA0"] and "draft_device" in place["chosen"]
        assert any(i["component"] == "draft weights" for i in rows["CUDA0"]["items"])
        assert r.result_line.startswith("result: fits on every device")


def test_the_refused_placement_is_refused_and_quoted(results):
    refused = [r for r in results if not r.fits]
    assert [(r.case.name, r.case.settings) for r in refused] == [("the 70B pair", twocards.ALONE)]
    r = refused[0]
    assert r.status == 1
    assert r.report["refusal"].startswith("CUDA1 would hold ")
    assert "(the sum fits, this device does not)" in r.report["refusal"]
    over = [row["name"] for row in r.report["per_device"] if not row["fits"]]
    assert over == ["CUDA1"]
    assert f"`{r.result_line}`" in twocards.README.read_text()
    # the same placement holds the 14B pair
    assert [r.fits for r in results if r.case.settings] == [False, True]


def test_the_models_are_shapes_with_no_data_written(results, models):
    for m in (twocards.LLAMA_70B, twocards.LLAMA_1B, *twocards.qwen_pair()):
        path = models / m.file
        assert path.stat().st_blocks * 512 < 1 << 20, f"{path}: data written (a sparse file was meant)"
        shape = ModelShape.of(read(path))  # the size checks out, as the fit requires
        assert (shape.n_layer, shape.n_embd, shape.n_head, shape.n_head_kv[0], shape.n_ff, shape.n_vocab,
                shape.tied) == (m.n_layer, m.n_embd, m.n_head, m.n_head_kv, m.n_ff, m.n_vocab, m.tied)
    big = twocards.LLAMA_70B
    assert (big.n_layer, big.n_embd, big.n_head_kv, big.n_vocab) == (80, 8192, 8, 128256)
    assert 2.45 < twocards.layer_bits(big) < 2.55  # the seed's 2.5 bits a weight


def test_the_qwen_files_are_synth_ggufs():
    """The Qwen2.5 tensor tables are scripts/gpu/synth_gguf.py's, the files the fit was checked against on an H100."""
    sg = twocards.synth_gguf()
    qwen14, qwen05 = twocards.qwen_pair()
    assert twocards.tensors(qwen14) == sg.tensors(sg.SHAPES["qwen2.5-14b"])
    assert twocards.tensors(qwen05) == sg.tensors(sg.SHAPES["qwen2.5-0.5b"])


def test_check_says_stale_and_update_rewrites(tmp_path, monkeypatch, models):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Two devices\n\n{twocards.BEGIN}\nSTALE TABLE\n{twocards.END}\n\n## Next\n")
    monkeypatch.setattr(twocards, "README", readme)
    main = script().main
    before = readme.read_text()
    assert main(["--check", "--models", str(models)]) == 1
    assert readme.read_text() == before
    assert main(["--update", "--models", str(models)]) == 0
    text = readme.read_text()
    assert "STALE TABLE" not in text and "| 70B (Llama 3 shape)" in text
    assert text.endswith(f"{twocards.END}\n\n## Next\n")
    assert main(["--check", "--models", str(models)]) == 0
