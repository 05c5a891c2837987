"""Arms: the name grammar, selection, and that every standard (and extra) arm renders to argv on the real
llama-server 0c1e57098 --help (fixture) through specops.argv."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.argv import build_argv
from specops.bench.arms import ArmError, parse_arm, select_arms, standard_arm_names
from specops.bench.runner import BenchConfig
from specops.bench.tasks import load_tasks
from specops.capabilities import parse_help
from specops.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "llama-server-0c1e57098" / "llama-server_help.txt"


def test_grammar() -> None:
    a = parse_arm("draft-n6-p0.75-nmin2")
    assert a.profile == {"spec_type": "draft-simple", "draft_n_max": 6, "draft_p_min": 0.75, "draft_n_min": 2}
    q = parse_arm("draft-iq4_xs-n3")
    assert q.draft == "IQ4_XS" and q.profile["draft_n_max"] == 3
    e = parse_arm("exact-n2")
    assert e.reference == "exact-baseline" and e.profile["cache_type_v"] == "q8_0"
    nr = parse_arm("exact-nr-n8")
    assert nr.env == {"GGML_CPU_TILED_MM": "0"} and nr.profile["repack"] is False
    assert nr.reference == "exact-nr-baseline"
    ng = parse_arm("ngram-mod-n8")
    assert ng.profile == {"spec_type": "ngram-mod", "draft_n_max": 8, "draft_n_min": 1} and ng.draft is None
    assert parse_arm("ngram-simple-m4").profile == {"spec_type": "ngram-simple", "ngram_size_m": 4}
    xng = parse_arm("exact-ngram-mod-n2")
    assert xng.reference == "exact-baseline" and xng.profile["flash_attn"] == "on"
    assert parse_arm("seeds").profile == {"spec_type": "draft-simple", "draft_n_max": 8, "draft_n_min": 1}


@pytest.mark.parametrize("bad", ["draft", "draft-n", "draft-nX", "turbo", "draft-n4-p2", "ngram-fast"])
def test_unknown_arm_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ArmError, match="unknown arm"):
        parse_arm(bad)


def test_select_adds_both_baselines_and_references() -> None:
    names = [a.name for a in select_arms(["exact-n2", "ngram-mod", "exact-n2"])]
    assert names == ["baseline", "baseline-again", "exact-baseline", "exact-n2", "ngram-mod"]
    with pytest.raises(ArmError):
        select_arms([" ", ""])


def test_standard_arms_are_the_draft_lengths_the_service_default_and_the_ngram_types() -> None:
    assert standard_arm_names() == ["draft-n4", "exact-n2", "ngram-simple", "ngram-mod"]
    more = standard_arm_names(p_min=(0.8,), quants=("Q4_0",), exact_nr_n_max=(3,), ngram_short=("ngram-mod-n8",))
    assert {"draft-n8-p0.8", "draft-q4_0-n4", "exact-nr-n3", "ngram-mod-n8"} <= set(more)


def test_every_standard_arm_renders_on_the_real_help() -> None:
    caps = parse_help(FIXTURE.read_text())
    extra = ["draft-n2", "draft-n8", "draft-n16", "draft-plain", "spec-default", "seeds", "ngram-cache",
             "draft-q4_0-n4", "exact-nr-n8", "ngram-mod-n8", "ngram-simple-m8", "ngram-map-k"]
    arms = select_arms(standard_arm_names() + extra)
    names = [a.name for a in arms]
    for required in ("baseline", "baseline-again", "draft-n4", "exact-baseline", "exact-n2",
                     "ngram-simple", "ngram-mod", "exact-nr-baseline", *extra):
        assert required in names
    cfg = BenchConfig(
        target=Path("/m/t.gguf"),
        draft=Path("/m/d.gguf"),
        server_binary=Path("llama-server"),
        caps=caps,
        tasks=load_tasks(limit_per_workload=1),
        threads=2,
        derived_drafts={
            "Q4_0": Path("/m/q4.gguf"),
            "Q3_K_M": Path("/m/q3.gguf"),
            "IQ4_XS": Path("/m/iq4.gguf"),
        },
    )
    rendered = {a.name: build_argv(cfg.profile_for(a), caps) for a in arms}
    assert rendered["baseline"][-2:] == ["--spec-type", "none"]
    assert rendered["baseline"][rendered["baseline"].index("--cache-ram") + 1] == "0"
    assert "--spec-default" in rendered["spec-default"]
    seeds = rendered["seeds"]
    assert seeds[seeds.index("--spec-draft-n-max") + 1] == "8" and seeds[seeds.index("--spec-draft-n-min") + 1] == "1"
    assert "--draft-max" not in " ".join(seeds)
    assert "/m/q4.gguf" in rendered["draft-q4_0-n4"]
    assert "--no-repack" in rendered["exact-nr-n8"]
    ex = rendered["exact-n2"]
    assert ex[ex.index("--flash-attn") + 1] == "on" and ex[ex.index("--cache-type-v") + 1] == "q8_0"
    ngm = rendered["ngram-mod-n8"]
    assert ngm[ngm.index("--spec-ngram-mod-n-max") + 1] == "8" and "--spec-draft-model" not in ngm
    assert "--spec-ngram-simple-size-m" in rendered["ngram-simple-m8"]
    plain = rendered["draft-plain"]
    assert "--spec-draft-n-max" not in plain and plain[plain.index("--spec-type") + 1] == "draft-simple"


def test_cli_rejects_unknown_arm_and_unknown_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--arms", "baseline,warp-drive", "--work-dir", str(tmp_path)]) == 2
    assert "unknown arm 'warp-drive'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--draft-lenght", "4"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --draft-lenght" in capsys.readouterr().err


def test_cli_rejects_empty_task_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["bench", "--tasks", str(empty), "--arms", "baseline", "--work-dir", str(tmp_path / "w")]) == 2
    assert "has no tasks" in capsys.readouterr().err


def test_mtp_arms_draft_with_the_targets_head_and_no_draft_model() -> None:
    caps = parse_help(FIXTURE.read_text())
    cfg = BenchConfig(target=Path("/m/t.gguf"), draft=Path("/m/d.gguf"), server_binary=Path("llama-server"),
                      caps=caps, tasks=load_tasks(limit_per_workload=1))
    arms = {a.name: a for a in select_arms(["mtp-n3", "exact-mtp-n2"])}
    assert arms["mtp-n3"].draft is None and arms["mtp-n3"].reference == "baseline"
    assert arms["exact-mtp-n2"].reference == "exact-baseline"
    argv = build_argv(cfg.profile_for(arms["mtp-n3"]), caps)
    assert argv[argv.index("--spec-type") + 1] == "draft-mtp" and argv[argv.index("--spec-draft-n-max") + 1] == "3"
    assert "--spec-draft-model" not in argv and "/m/d.gguf" not in argv
    ex = build_argv(cfg.profile_for(arms["exact-mtp-n2"]), caps)
    assert ex[ex.index("--cache-type-v") + 1] == "q8_0" and ex[ex.index("--spec-draft-n-max") + 1] == "2"


def test_cli_refuses_mtp_arms_on_a_target_without_mtp_layers(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    from tests.unit.synthgguf import write_gguf

    prefix = tmp_path / "llama"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "llama-server").write_text("")
    (prefix / "capabilities.json").write_text(json.dumps(parse_help(FIXTURE.read_text()).to_dict()))
    target = write_gguf(tmp_path / "t.gguf")
    rc = main(["bench", "--target", str(target), "--llama-prefix", str(prefix), "--arms", "mtp-n3",
               "--work-dir", str(tmp_path / "w"), "--no-ceiling"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "arm mtp-n3 draft with the target's own MTP head, but t.gguf has no MTP layers" in err, err
    assert len(err.splitlines()) == 1
