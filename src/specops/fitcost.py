"""The breakdown's lines that both the pooled and the per-device fit count: :class:`Item`, a model's KV cache line,
what a kind of speculation adds (recurrent states, draft-mtp's context, EAGLE-3's logits, ngram-mod's pool), and
the runtime's own overhead."""

from __future__ import annotations

from dataclasses import dataclass

from specops.fitparams import MIB, FitParams
from specops.fitshape import ModelShape
from specops.knobs import spec_type_members

OVERHEAD = 128 * MIB
# One llama-server process's CUDA context, cuBLAS handles and pools on the GPU, beyond its buffers: 571-583 MiB
# measured with nvidia-smi on an H100 (CUDA 13.0, driver 580) for four model shapes (reports/gpu-h100.md).
GPU_OVERHEAD = 576 * MIB
NGRAM_MOD_POOL = 4 * 1024 * 1024 * 4  # ngram-mod's hash table: 4 Mi int32 entries (common_speculative_impl_ngram_mod)
EAGLE3_ARCH = "eagle3"  # an EAGLE-3 draft: one decoder layer over the target's hidden states (src/models/eagle3.cpp)
# spec types whose target context keeps draft_n_max recurrent-state snapshots per sequence for rollback
# (common_params_speculative::need_n_rs_seq)
ROLLBACK_TYPES = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")


@dataclass
class Item:
    component: str
    bytes: int
    detail: str


def kv_item(component: str, s: ModelShape, cells: int, tk: str, tv: str, layers: list[int]) -> Item:
    kv = [s.n_head_kv[il] for il in layers] or [0]
    heads = kv[0] if len(set(kv)) == 1 else f"{min(kv)}..{max(kv)}"
    return Item(component, s.kv_bytes(cells, tk, tv, layers),
                f"{len(layers)} layers × {cells} cells × {heads} kv heads × "
                f"({s.key_length}×{tk} + {s.value_length}×{tv})")


def kind_items(tshape: ModelShape, dshape: ModelShape | None, params: FitParams, cells: int,
                gpu: bool = False) -> list[Item]:
    """What a kind of speculation adds beside the models' own KV: a hybrid target's recurrent states (with
    draft_n_max rollback snapshots each for MTP-like types), and draft-mtp's second context on the target (KV for
    the MTP layers, its compute buffer and outputs)."""
    members = set(spec_type_members(params.spec_type))
    out: list[Item] = []
    if any(tshape.recurrent):
        snaps = params.draft_n_max if members & set(ROLLBACK_TYPES) else 0
        rows = max(1, params.parallel) * (1 + snaps)
        out.append(Item("target recurrent state", tshape.recurrent_bytes(rows),
                        f"{sum(tshape.recurrent)} recurrent layers × {max(1, params.parallel)} sequences × "
                        f"(1 + {snaps} rollback snapshots) × ({tshape.n_embd_r} + {tshape.n_embd_s}) × f32"))
    if dshape is not None and dshape.arch == EAGLE3_ARCH:
        out.append(Item("draft logits (EAGLE-3)", 2 * dshape.n_vocab * params.ubatch_size * 4,
                        f"its compute buffer holds logits for a whole ubatch: 2 × {dshape.n_vocab} vocab × "
                        f"{params.ubatch_size} tokens × 4 B (llama.cpp reports it with the draft's compute)"))
    if members & {"ngram-mod", "default"} and not gpu:  # ``default`` is ngram-mod at 0c1e57098
        out.append(Item("ngram-mod pool", NGRAM_MOD_POOL, "4 Mi n-gram entries × 4 B in host RAM, one per server "
                        "(common/speculative.cpp)"))
    if "draft-mtp" in members and dshape is None and tshape.n_nextn > 0:
        out.append(kv_item("MTP KV cache", tshape, cells, params.cache_type_k, params.cache_type_v,
                            tshape.kv_layers(mtp=True)))
        out.append(Item("MTP compute", tshape.compute_bytes(cells, params.ubatch_size, params.flash_attn),
                        "the MTP context's own compute buffer (estimate, as the target's)"))
        out.append(Item("MTP output buffers", tshape.n_vocab * 4 * max(1, params.parallel),
                        "logits rows × n_vocab × 4 B"))
    return out
