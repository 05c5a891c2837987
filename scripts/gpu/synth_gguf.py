#!/usr/bin/env python3
"""Lab equipment (not shipped): a GGUF with the exact shapes of a real model and random weights.

A forward pass costs the same whatever the weights, so these files measure the hardware's side of
speculation (c(k), the draft's step cost r, VRAM) for targets too big to carry to a lab machine.
Shapes are the published hyper-parameters of Qwen2.5 (config.json of each model); the tokenizer is
copied from a vocab-only GGUF (llama.cpp ships ``models/ggml-vocab-qwen2.gguf``), so a synthetic
draft and target share a vocabulary the way the real pair does.

Quantization follows llama.cpp's Q4_K_M recipe closely enough for size and bandwidth: Q4_K for most
matrices, Q6_K for the output matrix (the embedding when tied) and for attn_v/ffn_down on the
"more bits" layers, Q8_0 where a row is not a multiple of 256 (the 0.5B's 896-wide rows; the real file
falls back the same way). Each block gets a fixed, valid scale and random quants centred on zero, so
activations stay finite; biases are zero and norms one.

    python3 scripts/gpu/synth_gguf.py --shape qwen2.5-7b --vocab models/ggml-vocab-qwen2.gguf OUT.gguf
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied: bool
    n_ctx_train: int = 32768
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# Qwen2.5 config.json: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# intermediate_size, tie_word_embeddings
SHAPES: dict[str, Shape] = {
    "qwen2.5-0.5b": Shape(896, 24, 14, 2, 4864, tied=True),
    "qwen2.5-1.5b": Shape(1536, 28, 12, 2, 8960, tied=True),
    "qwen2.5-7b": Shape(3584, 28, 28, 4, 18944, tied=False),
    "qwen2.5-14b": Shape(5120, 48, 40, 8, 13824, tied=False),
    "qwen2.5-32b": Shape(5120, 64, 40, 8, 27648, tied=False),
}

Q = GGMLQuantizationType
WEIGHT_STD = 0.02


def more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's use_more_bits (src/llama-quant.cpp): first and last eighth, and every third between."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def pick_type(cols: int, wanted: GGMLQuantizationType) -> GGMLQuantizationType:
    return wanted if cols % GGML_QUANT_SIZES[wanted][0] == 0 else Q.Q8_0


def tensors(s: Shape) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType]]:
    """(name, numpy shape (rows, cols), type) in llama.cpp's qwen2 tensor names."""
    out: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = []
    vocab = 151936
    out.append(("token_embd.weight", (vocab, s.n_embd), pick_type(s.n_embd, Q.Q6_K if s.tied else Q.Q4_K)))
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    for i in range(s.n_layer):
        b = f"blk.{i}."
        big = more_bits(i, s.n_layer)
        out += [
            (b + "attn_norm.weight", (s.n_embd,), Q.F32),
            (b + "attn_q.weight", (q, s.n_embd), pick_type(s.n_embd, Q.Q4_K)),
            (b + "attn_q.bias", (q,), Q.F32),
            (b + "attn_k.weight", (kv, s.n_embd), pick_type(s.n_embd, Q.Q4_K)),
            (b + "attn_k.bias", (kv,), Q.F32),
            (b + "attn_v.weight", (kv, s.n_embd), pick_type(s.n_embd, Q.Q6_K if big else Q.Q4_K)),
            (b + "attn_v.bias", (kv,), Q.F32),
            (b + "attn_output.weight", (s.n_embd, q), pick_type(q, Q.Q4_K)),
            (b + "ffn_norm.weight", (s.n_embd,), Q.F32),
            (b + "ffn_gate.weight", (s.n_ff, s.n_embd), pick_type(s.n_embd, Q.Q4_K)),
            (b + "ffn_up.weight", (s.n_ff, s.n_embd), pick_type(s.n_embd, Q.Q4_K)),
            (b + "ffn_down.weight", (s.n_embd, s.n_ff), pick_type(s.n_ff, Q.Q6_K if big else Q.Q4_K)),
        ]
    out.append(("output_norm.weight", (s.n_embd,), Q.F32))
    if not s.tied:
        out.append(("output.weight", (vocab, s.n_embd), pick_type(s.n_embd, Q.Q6_K)))
    return out


class Noise:
    """Random bytes from a fixed pool (fast: a 14B file is ~9 GB); ``seed`` gives another model."""

    def __init__(self, seed: int, pool_mib: int = 64) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(0, 256, size=pool_mib << 20, dtype=np.uint8)

    def take(self, n: int) -> np.ndarray:
        start = int(self.rng.integers(0, len(self.pool)))
        reps = -(-(n + start) // len(self.pool))
        return np.tile(self.pool, reps)[start:start + n].copy() if reps > 1 else self.pool[start:start + n].copy()


def f16_bytes(x: float) -> np.ndarray:
    return np.frombuffer(np.float16(x).tobytes(), dtype=np.uint8)


def quantized(shape: tuple[int, ...], qtype: GGMLQuantizationType, noise: Noise) -> np.ndarray:
    """Random blocks with valid, fixed scales: weights centred on 0 with std about WEIGHT_STD."""
    block, size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    raw = noise.take(rows * cols // block * size).reshape(-1, size)
    if qtype == Q.Q8_0:  # d (f16), 32 × int8 (std ~74)
        raw[:, 0:2] = f16_bytes(WEIGHT_STD / 74)
    elif qtype == Q.Q4_K:  # d, dmin (f16), 12 B of 6-bit scales/mins, 128 B of nibbles
        # scale bytes 0x11: every sub-block gets scale == min (17 for the first four, 1 for the rest), so with
        # dmin = 8·d a weight is d·scale·(q − 8): zero mean
        d = WEIGHT_STD / (17 * 4.6)
        raw[:, 0:2] = f16_bytes(d)
        raw[:, 2:4] = f16_bytes(8 * d)
        raw[:, 4:16] = 0x11
    elif qtype == Q.Q6_K:  # 128 B low bits, 64 B high bits, 16 × int8 scales, d (f16): d·scale·(q − 32)
        raw[:, 192:208] = 8
        raw[:, 208:210] = f16_bytes(WEIGHT_STD / (8 * 18.5))
    else:
        raise ValueError(qtype)
    return raw.reshape(rows, -1)


def copy_tokenizer(writer: GGUFWriter, vocab_path: Path) -> None:
    reader = GGUFReader(vocab_path)
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                values = [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
            else:
                values = [field.parts[i][0].item() for i in field.data]
            writer.add_key_value(name, values, vtype, sub_type=sub)
        elif vtype == GGUFValueType.STRING:
            writer.add_key_value(name, bytes(field.parts[field.data[0]]).decode(), vtype)
        else:
            writer.add_key_value(name, field.parts[field.data[0]][0].item(), vtype)


def write(shape_name: str, vocab: Path, out: Path, seed: int) -> int:
    s = SHAPES[shape_name]
    w = GGUFWriter(out, "qwen2")
    w.add_name(f"synthetic {shape_name} (random weights, seed {seed})")
    w.add_block_count(s.n_layer)
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(s.rope_theta)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    w.add_quantization_version(2)
    copy_tokenizer(w, vocab)
    plan = tensors(s)
    for name, shp, qt in plan:
        if qt == Q.F32:
            w.add_tensor_info(name, shp, np.dtype(np.float32), int(np.prod(shp)) * 4)
        else:
            block, size = GGML_QUANT_SIZES[qt]
            w.add_tensor_info(name, (shp[0], shp[1] // block * size), np.dtype(np.uint8),
                              shp[0] * shp[1] // block * size, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    noise = Noise(seed)
    for name, shp, qt in plan:
        if qt == Q.F32:
            data = np.zeros(shp, np.float32) if name.endswith(".bias") else np.ones(shp, np.float32)
        else:
            data = quantized(shp, qt, noise)
        w.write_tensor_data(data)
    w.close()
    return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--vocab", type=Path, required=True, help="vocab-only GGUF whose tokenizer.* keys are copied")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("out", type=Path)
    a = p.parse_args(argv)
    if not a.vocab.is_file():
        print(f"synth_gguf: vocab GGUF {a.vocab} not found", file=sys.stderr)
        return 2
    size = write(a.shape, a.vocab, a.out, a.seed)
    print(f"synth_gguf: {a.out} {a.shape} {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
