"""A model's shape from its GGUF header (:class:`ModelShape`) and the per-model arithmetic on it: weights by layer,
KV cells and bytes (:func:`kv_cells`, :func:`cache_type_bytes`), the compute buffer, a hybrid's recurrent states.

KV(model) = n_layer × n_cells × (n_head_kv × key_length × bytes(cache_type_k)
                                 + n_head_kv × value_length × bytes(cache_type_v))

``n_cells`` follows llama.cpp (src/llama-context.cpp at 0c1e57098): ``-c`` is the *total* context shared
by the ``-np`` slots, padded to a multiple of 256; with a per-slot (non-unified) cache each slot gets
``pad(n_ctx / n_parallel, 256)`` cells, so n_cells = that × n_parallel. ``bytes(type)`` comes from ggml's block
sizes. The formulas and their calibration are in :mod:`specops.fit`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specops.fitparams import FitError
from specops.ggufmeta import GGUFInfo
from specops.knobs import CACHE_TYPES

INPUT_EMBEDDING = "token_embd.weight"  # llama.cpp keeps the input layer in host RAM even with every layer offloaded
OUTPUT = "output.weight"


def cache_type_bytes(name: str) -> float:
    if name.lower() not in CACHE_TYPES:
        raise FitError(f"unknown cache type {name!r}; llama.cpp accepts {', '.join(CACHE_TYPES)}")
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]
    return size / block


def pad(n: int, to: int = 256) -> int:
    return (n + to - 1) // to * to


def kv_cells(n_ctx: int, n_parallel: int, kv_unified: bool) -> int:
    cells = pad(n_ctx)
    if kv_unified or n_parallel <= 1:
        return cells
    return pad(cells // n_parallel) * n_parallel


@dataclass
class ModelShape:
    path: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: list[int]  # per layer
    key_length: int
    value_length: int
    n_vocab: int
    context_length: int
    weights: int
    sliding_window: int | None
    input_bytes: int = 0  # the input embedding (host RAM when offloaded)
    tied: bool = False  # no output matrix: the embedding is copied to the GPU as the output layer
    arch: str = ""
    n_nextn: int = 0  # MTP layers after the trunk (<arch>.nextn_predict_layers)
    recurrent: tuple[bool, ...] = ()  # per layer: a recurrent (linear-attention) layer, which keeps no KV
    n_embd_r: int = 0  # a recurrent layer's conv state per sequence (floats)
    n_embd_s: int = 0  # a recurrent layer's SSM state per sequence (floats)
    # per layer: the bytes of its tensors (blk.N.*); () where not known (then the layers share the weights evenly)
    layer_bytes: tuple[int, ...] = ()
    output_bytes: int = 0  # the tensors of no layer but the input embedding (output.weight, output_norm, ...)

    @classmethod
    def of(cls, info: GGUFInfo) -> ModelShape:
        n_layer = info.arch_get("block_count")
        n_embd = info.arch_get("embedding_length")
        n_head = info.arch_get("attention.head_count")
        if n_head is None:
            raw_heads = info.array(f"{info.arch}.attention.head_count")
            n_head = max(raw_heads) if raw_heads else None
        if not (n_layer and n_embd and n_head):
            raise FitError(f"{info.path}: {info.arch}.block_count/embedding_length/attention.head_count "
                           "missing: not a decoder LLM that this estimate understands")
        kv = info.arch_get("attention.head_count_kv")  # a scalar, or a per-layer array
        raw_kv = info.array(f"{info.arch}.attention.head_count_kv") if kv is None else None
        kv_list = [int(x) for x in raw_kv] if raw_kv else [int(n_head if kv is None else kv)] * int(n_layer)
        head_dim = int(n_embd) // int(n_head)
        n_ff = info.arch_get("feed_forward_length")
        if n_ff is None:
            raw_ff = info.array(f"{info.arch}.feed_forward_length")
            n_ff = max(raw_ff) if raw_ff else 4 * n_embd
        n_vocab = info.array_lengths.get("tokenizer.ggml.tokens") or int(info.arch_get("vocab_size", 0) or 0)
        return cls(
            path=str(info.path), n_layer=int(n_layer), n_embd=int(n_embd), n_ff=int(n_ff), n_head=int(n_head),
            n_head_kv=kv_list, key_length=int(info.arch_get("attention.key_length", head_dim)),
            value_length=int(info.arch_get("attention.value_length", head_dim)), n_vocab=int(n_vocab),
            context_length=int(info.arch_get("context_length", 0) or 0), weights=info.tensor_bytes,
            sliding_window=info.arch_get("attention.sliding_window"),
            input_bytes=sum(t.n_bytes for t in info.tensors if t.name == INPUT_EMBEDDING),
            tied=not any(t.name == OUTPUT for t in info.tensors), arch=str(info.arch), **_hybrid(info, int(n_layer)),
            **_by_layer(info, int(n_layer)),
        )

    @property
    def n_trunk(self) -> int:
        return trunk_layers(self.n_layer, self.n_nextn)

    def kv_layers(self, mtp: bool = False) -> list[int]:
        """The layers with a KV cache: in the target's context its trunk's attention layers; in an MTP context
        (``--spec-type draft-mtp``) the MTP layers alone (llama_model::create_memory's layer filters)."""
        if mtp:
            return list(range(self.n_trunk, self.n_layer))
        return [il for il in range(self.n_trunk) if not (il < len(self.recurrent) and self.recurrent[il])]

    def recurrent_bytes(self, rows: int) -> int:
        """The recurrent layers' states (f32): ``rows`` = sequences × (1 + rollback snapshots)."""
        return 4 * sum(self.recurrent) * rows * (self.n_embd_r + self.n_embd_s)

    def layer_weights(self) -> list[int]:
        """Each layer's weight bytes (llama.cpp places whole layers): from the tensor table, else an even share of
        what is not the output layer."""
        if len(self.layer_bytes) == self.n_layer:
            return list(self.layer_bytes)
        each = max(0, self.weights - self.input_bytes - self.output_bytes) // max(1, self.n_layer)
        return [each] * self.n_layer

    def output_weights(self) -> int:
        """The output layer's bytes where it is offloaded: its own tensors, and with tied embeddings the copy of the
        input embedding that serves as the output matrix."""
        return self.output_bytes + (self.input_bytes if self.tied else 0)

    def gpu_weights(self) -> int:
        """Weight bytes on the GPU with every layer offloaded: all but the input embedding, which llama.cpp
        keeps in host RAM; with tied embeddings it is also the output layer, so a copy lives on the GPU."""
        return self.weights if self.tied else self.weights - self.input_bytes

    def kv_bytes(self, cells: int, type_k: str, type_v: str, layers: list[int] | None = None) -> int:
        bk, bv = cache_type_bytes(type_k), cache_type_bytes(type_v)
        heads = [self.n_head_kv[il] for il in (self.kv_layers() if layers is None else layers)]
        per_cell = sum(h * self.key_length * bk + h * self.value_length * bv for h in heads)
        return int(cells * per_cell)

    def compute_bytes(self, cells: int, n_ubatch: int, flash_attn: bool) -> int:
        act = 4 * n_ubatch * (3 * self.n_ff + 4 * self.n_embd)
        mask = 2 * n_ubatch * cells
        scores = 0 if flash_attn else 4 * n_ubatch * cells * self.n_head
        return act + mask + scores


# Gated-DeltaNet hybrids: every full_attention_interval-th trunk layer attends (keeps KV), the others are recurrent
# (src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp at 0c1e57098: attention.recurrent_layers when the file has it)
HYBRID_ARCHS = ("qwen35", "qwen35moe", "qwen3next")


def trunk_layers(n_layer: int, n_nextn: int) -> int:
    """The layers the target's own context runs: all but the MTP layers (llama.cpp keeps every layer where the
    model is MTP layers alone)."""
    return n_layer - n_nextn if 0 < n_nextn < n_layer else n_layer


_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.")


def _by_layer(info: GGUFInfo, n_layer: int) -> dict[str, Any]:
    """The weight bytes of each layer (``blk.N.*``) and of the rest but the input embedding (the output layer's)."""
    per = [0] * n_layer
    rest = 0
    for t in info.tensors:
        m = _LAYER_TENSOR.match(t.name)
        if m and int(m.group(1)) < n_layer:
            per[int(m.group(1))] += t.n_bytes
        elif t.name != INPUT_EMBEDDING:
            rest += t.n_bytes
    return {"layer_bytes": tuple(per), "output_bytes": rest}


def _hybrid(info: GGUFInfo, n_layer: int) -> dict[str, Any]:
    """The MTP layer count and, for a hybrid architecture, which layers are recurrent and their state sizes."""
    n_nextn = int(info.arch_get("nextn_predict_layers", 0) or 0)
    out: dict[str, Any] = {"n_nextn": n_nextn}
    if info.arch not in HYBRID_ARCHS:
        return out
    trunk = trunk_layers(n_layer, n_nextn)
    flags = info.array(f"{info.arch}.attention.recurrent_layers")
    if flags is not None and len(flags) == n_layer:
        out["recurrent"] = tuple(bool(f) for f in flags)
    else:
        every = int(info.arch_get("full_attention_interval", 4) or 4)
        out["recurrent"] = tuple(il < trunk and (il + 1) % every != 0 for il in range(n_layer))
    d_conv, d_inner = int(info.arch_get("ssm.conv_kernel", 0) or 0), int(info.arch_get("ssm.inner_size", 0) or 0)
    d_state, n_group = int(info.arch_get("ssm.state_size", 0) or 0), int(info.arch_get("ssm.group_count", 0) or 0)
    out["n_embd_r"] = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    out["n_embd_s"] = d_state * d_inner
    return out
