"""Inventory variables for the bench's choice (the role's variables of an arm: the deploy's one mapping,
:func:`specops.tune.deploy.role_vars`), written down and passed by --apply to the deploy playbook."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specops.bench.arms import parse_arm
from specops.bench.inventory import ApplyError, apply, header_for, write_vars
from specops.tune.deploy import role_vars as inventory_vars


def test_baseline_vars_clear_the_draft() -> None:
    v = inventory_vars(parse_arm("baseline").to_dict(), threads=2, draft_threads=2)
    assert v["llama_server_spec_type"] == "none"
    assert v["llama_server_draft_model"] == ""
    assert v["llama_server_draft_threads"] is None and v["llama_server_threads"] == 2


def test_exact_nr_vars_carry_numerics_and_environment() -> None:
    v = inventory_vars(parse_arm("exact-nr-n8").to_dict(), threads=None, draft_threads=None)
    assert v["llama_server_spec_type"] == "draft-simple"
    assert v["llama_server_draft_n_max"] == 8
    assert v["llama_server_flash_attn"] == "on" and v["llama_server_cache_type_v"] == "q8_0"
    assert v["llama_server_repack"] is False
    assert v["llama_server_environment"] == {"GGML_CPU_TILED_MM": "0"}
    assert "llama_server_draft_model" not in v  # the role's own draft model stays


def test_derived_draft_is_flagged() -> None:
    v = inventory_vars(parse_arm("draft-q4_0-n4").to_dict(), 2, 2, derived_draft="/c/d.requant-Q4_0.gguf")
    assert v["llama_server_draft_requantize"] == "Q4_0"


def test_write_and_apply(tmp_path: Path) -> None:
    vars_file = write_vars(
        tmp_path / "gv" / "speculative.yml",
        inventory_vars(parse_arm("ngram-mod-n8").to_dict(), 2, None),
        header_for("ngram-mod-n8", "because", "identical", "reports/x.md"),
    )
    text = vars_file.read_text()
    assert text.startswith("---\n# Written by `specops bench`")
    assert "Chosen by the tune's rule: ngram-mod-n8 (identity rule 'identical')" in text
    assert yaml.safe_load(text)["llama_server_spec_type"] == "ngram-mod"
    playbook = tmp_path / "deploy.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  connection: local\n  tasks:\n"
        "    - ansible.builtin.assert:\n        that: [llama_server_spec_type == 'ngram-mod',"
        " llama_server_draft_n_max == 8]\n"
    )
    assert apply(vars_file, playbook, None) == 0
    with pytest.raises(ApplyError, match="not found"):
        apply(vars_file, tmp_path / "missing.yml", None)
