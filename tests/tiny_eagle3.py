"""A tiny EAGLE-3 draft GGUF for a given target (issue 43): random weights, the pinned llama.cpp's own definition.

No real EAGLE-3 GGUF reaches these machines, so the tests make one for SmolLM2-135M: architecture ``eagle3`` with one
decoder layer, the keys and tensors ``src/models/eagle3.cpp`` (0c1e57098) loads and ``conversion/llama.py`` writes
for a converted EAGLE-3 checkpoint:

- ``eagle3.target_layers``: the three target layers whose hidden states it fuses (the converter's default
  ``[2, n/2, n-3]``), ``eagle3.target_hidden_size``: the target's hidden size (``fc`` takes three of them);
- the target's tokenizer (the converter copies it too: the server checks the two vocabularies agree);
- no ``token_embd`` and no ``output``: the decoder then uses the target's (``eagle3.cpp``: "own or from target
  model"), so its hidden size is the target's (as real EAGLE-3 heads have it); one layer with a narrow
  feed-forward keeps the file at ~10 MB.

Random weights: its drafts are never right; the tests show the kind loads, drafts and is counted, not a speed.
``target_hidden`` writes a wrong hidden size on purpose (the preflight's refusal).

    python -m tests.tiny_eagle3 TARGET.gguf OUT.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from specops.paths import cache_dir
from tests.tiny_mtp import finish

ARCH = "eagle3"
HEAD_DIM, N_FF = 64, 128  # the hidden size is the target's (its embeddings and output head are shared)


def _field(reader: GGUFReader, name: str) -> object:
    field = reader.fields.get(name)
    if field is None:
        raise ValueError(f"{name} missing from the target's GGUF header")
    return field.contents()


def _tensors(rng: np.random.Generator, n_embd: int, n_head: int, n_head_kv: int) -> dict[str, np.ndarray]:
    def mat(*ne: int) -> np.ndarray:  # ggml order (ne0 = the input dimension); numpy's shape is reversed
        return (rng.standard_normal(tuple(reversed(ne))) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    p = "blk.0."
    return {
        "fc.weight": mat(3 * n_embd, n_embd), "output_norm.weight": ones(n_embd),
        p + "attn_norm.weight": ones(n_embd), p + "attn_norm_2.weight": ones(n_embd),
        # attention reads the normed token embedding and the fused target features side by side: 2 × n_embd
        p + "attn_q.weight": mat(2 * n_embd, n_head * HEAD_DIM),
        p + "attn_k.weight": mat(2 * n_embd, n_head_kv * HEAD_DIM),
        p + "attn_v.weight": mat(2 * n_embd, n_head_kv * HEAD_DIM),
        p + "attn_output.weight": mat(n_head * HEAD_DIM, n_embd),
        p + "ffn_norm.weight": ones(n_embd), p + "ffn_gate.weight": mat(n_embd, N_FF),
        p + "ffn_up.weight": mat(n_embd, N_FF), p + "ffn_down.weight": mat(N_FF, n_embd),
    }


def write(target: Path, path: Path, seed: int = 0, target_hidden: int | None = None) -> Path:
    """Write an EAGLE-3 draft for ``target`` to ``path`` (through a temporary name: a cut run leaves no half file)."""
    reader = GGUFReader(str(target))
    arch = str(_field(reader, "general.architecture"))
    n_embd_tgt = int(_field(reader, f"{arch}.embedding_length"))  # type: ignore[call-overload]
    n_layer_tgt = int(_field(reader, f"{arch}.block_count"))  # type: ignore[call-overload]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    w = GGUFWriter(str(tmp), ARCH)
    w.add_name(f"tiny EAGLE-3 draft for {target.name} (random weights, specops tests)")
    w.add_block_count(1)
    w.add_context_length(int(_field(reader, f"{arch}.context_length")))  # type: ignore[call-overload]
    n_head = max(1, n_embd_tgt // HEAD_DIM)
    n_head_kv = 3 if n_head % 3 == 0 else n_head
    w.add_embedding_length(n_embd_tgt)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(float(_field(reader, f"{arch}.rope.freq_base")))  # type: ignore[arg-type]
    w.add_array(f"{ARCH}.target_layers", [2, n_layer_tgt // 2, n_layer_tgt - 3])
    w.add_uint32(f"{ARCH}.target_hidden_size", n_embd_tgt if target_hidden is None else target_hidden)
    w.add_file_type(0)  # all F32
    for name, field in reader.fields.items():  # the target's tokenizer, as the converter copies it
        if name.startswith("tokenizer."):
            kind = field.types[0]
            sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
            w.add_key_value(name, field.contents(), kind, sub_type=sub)
    return finish(w, _tensors(np.random.default_rng(seed), n_embd_tgt, n_head, n_head_kv), tmp, path)


def cached(target: Path) -> Path:
    """The draft for ``target`` in the cache ($SPECOPS_CACHE/models), written the first time (seed 0: the same bytes
    every time, so a deploy can name its sha256)."""
    path = cache_dir() / "models" / f"tiny-eagle3-{target.stem}.gguf"
    return path if path.exists() else write(target, path)


if __name__ == "__main__":
    print(write(Path(sys.argv[1]), Path(sys.argv[2])))
