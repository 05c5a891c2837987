"""Export a GGUF file's vocabulary as a Hugging Face model directory's tokenizer files.

Writes ``tokenizer.json`` (the vocabulary, ``added_tokens`` for control and user-defined tokens, the merges when
the GGUF has them), ``tokenizer_config.json`` (BOS/EOS and whether they are added) and a ``config.json`` with
the vocabulary size, the special ids and the architecture's shape keys the GGUF carries. The result is what
:mod:`specops.tabbyapi.hfvocab` reads, so a GGUF model and its exported directory must check as identical; it is
a vocabulary for comparison, not a complete tokenizer (no normalizer or pre-tokenizer is written).

Mapping (the reverse of llama.cpp's ``convert_hf_to_gguf.py``): ``tokenizer.ggml.model`` llama → BPE with
``byte_fallback`` (SentencePiece-style), gpt2 → byte-level BPE, t5 → Unigram (with the scores), bert → WordPiece.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specops.ggufmeta import GGUFInfo, read
from specops.pair import NULL, PairInputError, vocab_of

_CONTROL, _USER_DEFINED = 3, 4
_SHAPE_KEYS = {"embedding_length": "hidden_size", "block_count": "num_hidden_layers",
               "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
               "feed_forward_length": "intermediate_size", "context_length": "max_position_embeddings"}


def _model_section(info: GGUFInfo, tokens: list[str]) -> dict[str, Any]:
    kind = str(info.get("tokenizer.ggml.model"))
    if kind == "t5":
        scores = info.array("tokenizer.ggml.scores") or [0.0] * len(tokens)
        return {"type": "Unigram", "unk_id": info.get("tokenizer.ggml.unknown_token_id"), "byte_fallback": False,
                "vocab": [[t, float(s)] for t, s in zip(tokens, scores, strict=False)]}
    if kind == "bert":
        return {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100, "vocab": {t: i for i, t in reversed(list(enumerate(tokens)))}}
    if kind not in ("llama", "gpt2"):
        raise PairInputError(f"{info.path}: tokenizer {kind!r} has no Hugging Face export here")
    merges = [str(m) for m in (info.array("tokenizer.ggml.merges") or [])]
    return {"type": "BPE", "dropout": None, "unk_token": "<unk>" if kind == "llama" else None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": kind == "llama",
            "byte_fallback": kind == "llama", "vocab": {t: i for i, t in reversed(list(enumerate(tokens)))},
            "merges": merges}


def export(gguf: str | Path, out_dir: str | Path) -> Path:
    """Write the three files into ``out_dir`` (created) and return it."""
    info = read(gguf, check_data=False)  # vocab-only GGUFs (llama.cpp's models/ggml-vocab-*.gguf) have no tensors
    vocab = vocab_of(info)
    raw = [str(t) for t in (info.array("tokenizer.ggml.tokens") or [])]
    types = list(info.array("tokenizer.ggml.token_type") or [1] * len(raw))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": int(k) == _CONTROL} for i, (t, k) in enumerate(zip(raw, types, strict=False))
             if int(k) in (_CONTROL, _USER_DEFINED)]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
                 "pre_tokenizer": None, "post_processor": None, "decoder": None,
                 "model": _model_section(info, raw)}
    name = lambda i: raw[i] if i != NULL else None  # noqa: E731
    tok_config = {"bos_token": name(vocab.bos), "eos_token": name(vocab.eos), "add_bos_token": vocab.add_bos,
                  "add_eos_token": vocab.add_eos, "specops_exported_from": Path(gguf).name}
    config: dict[str, Any] = {"model_type": info.arch, "vocab_size": len(raw),
                              "bos_token_id": vocab.bos if vocab.bos != NULL else None,
                              "eos_token_id": vocab.eos if vocab.eos != NULL else None}
    for key, hf in _SHAPE_KEYS.items():
        value = info.arch_get(key)
        if isinstance(value, (int, float)):
            config[hf] = int(value)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for fname, data in (("tokenizer.json", tokenizer), ("tokenizer_config.json", tok_config),
                        ("config.json", config)):
        (out / fname).write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return out
