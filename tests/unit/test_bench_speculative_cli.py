"""The llama-speculative cross-check: its own argv (checked against its --help) and its output."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.speculative_cli import CliError, parse_output, speculative_argv
from specops.capabilities import parse_help

HELP = Path(__file__).resolve().parents[1] / "fixtures" / "llama-speculative-0c1e57098" / "help.txt"

# stderr tail of a real run (lab build 0c1e57098, Qwen2.5-Coder 1.5B + 0.5B, n-max 8)
STDERR = """0.03.594.206 I cmn          init: llama threadpool init, n_threads = 1
0.25.406.465 I encoded  109 tokens in   14.440 seconds, speed:    7.549 t/s
0.25.406.466 I decoded   19 tokens in    4.979 seconds, speed:    3.816 t/s
0.25.406.466 I
0.25.406.467 I n_draft   = 8
0.25.406.467 I n_predict = 19
0.25.406.468 I n_drafted = 16
0.25.406.468 I n_accept  = 16
0.25.406.469 I accept    = 100.000%
"""


def test_argv_uses_its_own_flags() -> None:
    caps = parse_help(HELP.read_text())
    argv = speculative_argv(
        Path("llama-speculative"),
        caps,
        Path("t.gguf"),
        Path("d.gguf"),
        Path("p.txt"),
        64,
        42,
        4096,
        2,
        {
            "spec_type": "draft-simple",
            "draft_n_max": 8,
            "draft_p_min": 0.5,
            "flash_attn": "on",
            "cache_type_v": "q8_0",
            "repack": False,
        },
    )
    assert argv[:7] == ["llama-speculative", "-m", "t.gguf", "-md", "d.gguf", "-f", "p.txt"]
    assert "--no-escape" in argv and argv[argv.index("--temp") + 1] == "0"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "8"
    assert argv[argv.index("--spec-draft-p-min") + 1] == "0.5"
    assert "--no-repack" in argv and "--draft-max" not in argv


def test_unknown_flag_for_the_binary_is_refused() -> None:
    caps = parse_help(HELP.read_text())
    caps.flags.discard("--spec-draft-n-max")
    with pytest.raises(CliError):
        speculative_argv(Path("x"), caps, Path("t"), Path("d"), Path("p"), 8, 1, 512, None, {"draft_n_max": 4})


def test_parse_output_numbers_and_text() -> None:
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    res = parse_output("\n\n" + prompt + "Hello there!\n\n", STDERR, prompt)
    assert res["text"] == "Hello there!" and res["text_exact"]
    assert res["n_predicted"] == 19 and res["decode_tps"] == pytest.approx(3.816)
    assert res["draft_n"] == 16 and res["draft_n_accepted"] == 16 and res["n_draft_max"] == 8
    assert res["prompt_n"] == 109


def test_parse_output_without_numbers_is_an_error() -> None:
    with pytest.raises(CliError, match="decoded"):
        parse_output("", "error: failed to load model\n", "x")
