"""Small synthetic GGUF files written with ``gguf.GGUFWriter`` for fast unit tests of header parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter


def vocab(n: int) -> list[str]:
    return ["<unk>", "<s>", "</s>", "<pad>", "<extra>"] + [f"tok{i}" for i in range(5, n)]


def write_gguf(
    path: Path,
    *,
    n_vocab: int = 300,
    tokens: list[str] | None = None,
    tokenizer: str = "gpt2",
    pre: str | None = "qwen2",
    bos: int | None = 1,
    eos: int | None = 2,
    add_bos: bool | None = False,
    add_eos: bool | None = None,
    arch: str = "llama",
    n_layer: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int | list[int] = 2,
    n_ff: int = 128,
    ctx: int = 2048,
    extra_tensor_elems: int = 0,
    extra: dict[str, Any] | None = None,
    output_tensor: bool = False,
) -> Path:
    """Write a tiny but structurally complete GGUF: header, tokenizer keys, a few f32 tensors."""
    toks = tokens if tokens is not None else vocab(n_vocab)
    w = GGUFWriter(str(path), arch)
    w.add_name(f"synthetic {path.stem}")
    w.add_block_count(n_layer)
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_file_type(0)
    w.add_tokenizer_model(tokenizer)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(toks)
    w.add_token_types([1] * len(toks))
    if tokenizer == "gpt2":
        w.add_token_merges(["t o", "to k"])
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    for key, value in (extra or {}).items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, str(value))
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((len(toks), 8), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    if output_tensor:  # an untied output matrix (else the embedding is the output layer)
        w.add_tensor("output.weight", rng.standard_normal((len(toks), 8), dtype=np.float32))
    if extra_tensor_elems:
        w.add_tensor("blk.0.extra.weight", rng.standard_normal(extra_tensor_elems, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
