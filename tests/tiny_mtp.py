"""A tiny qwen35 GGUF with one MTP (nextn) layer and random weights: issue 43's test material for ``draft-mtp``.

No real MTP-headed GGUF reaches these machines, so this writes one from the pinned llama.cpp's own definitions
(read in ``src/models/qwen35.cpp`` and ``src/llama-model.cpp`` of 0c1e57098; ``tests/test-llama-archs.cpp`` writes no
``nextn`` layer and loads with ``load_mtp=false``, so it cannot make one):

* ``qwen35.block_count`` counts the trunk and the MTP layer (``n_layer = block_count - nextn_predict_layers``,
  llama-model.cpp), ``qwen35.nextn_predict_layers = 1``; the graph takes exactly one MTP block.
* ``full_attention_interval = 2``: blk.0 is a Gated-DeltaNet (recurrent) layer, blk.1 full attention, blk.2 the MTP
  block (never recurrent), with ``nextn.eh_proj``, ``nextn.enorm``, ``nextn.hnorm``, ``nextn.shared_head_norm``.
* ``ssm.inner_size = ssm.state_size * ssm.time_step_rank``; ``ssm_a`` negative; ``rope.dimension_sections`` set.
* Tokenizer ``test`` (llama.cpp's built-in dummy: no EOS, no chat template: use ``/completion``).

All F32, 9.7 MB. Random weights: the MTP head drafts (``draft_n`` counts), its acceptance is whatever it is.

    python -m tests.tiny_mtp [OUT]     default OUT: $SPECOPS_CACHE/models/tiny-qwen35-mtp.gguf (made once, then reused)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from specops.paths import cache_dir

ARCH = "qwen35"
N_VOCAB, N_EMBD, N_FF = 512, 256, 512
N_HEAD, N_HEAD_KV, HEAD_DIM, N_ROT = 2, 2, 128, 64
SSM_CONV, SSM_STATE, SSM_GROUPS, SSM_V_HEADS = 4, 128, 2, 2
N_TRUNK = 2  # trunk layers; blk.N_TRUNK is the MTP block
NAME = "tiny-qwen35-mtp.gguf"


def default_path() -> Path:
    return cache_dir() / "models" / NAME


def _tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def mat(*ne: int) -> np.ndarray:  # ggml order (ne0 = the input dimension); numpy's shape is reversed
        return (rng.standard_normal(tuple(reversed(ne))) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    key_dim, value_dim = SSM_STATE * SSM_GROUPS, SSM_STATE * SSM_V_HEADS
    conv = 2 * key_dim + value_dim
    t = {"token_embd.weight": mat(N_EMBD, N_VOCAB), "output_norm.weight": ones(N_EMBD)}  # output tied to token_embd
    for il in range(N_TRUNK + 1):
        p = f"blk.{il}."
        t |= {p + "attn_norm.weight": ones(N_EMBD), p + "post_attention_norm.weight": ones(N_EMBD)}
        if il < N_TRUNK and (il + 1) % 2:  # recurrent (Gated-DeltaNet) layer
            t |= {p + "attn_qkv.weight": mat(N_EMBD, conv), p + "attn_gate.weight": mat(N_EMBD, value_dim),
                  p + "ssm_conv1d.weight": mat(SSM_CONV, conv), p + "ssm_dt.bias": np.zeros(SSM_V_HEADS, np.float32),
                  p + "ssm_a": -ones(SSM_V_HEADS), p + "ssm_beta.weight": mat(N_EMBD, SSM_V_HEADS),
                  p + "ssm_alpha.weight": mat(N_EMBD, SSM_V_HEADS), p + "ssm_norm.weight": ones(SSM_STATE),
                  p + "ssm_out.weight": mat(value_dim, N_EMBD)}
        else:  # full attention (the query carries its gate: twice the width)
            t |= {p + "attn_q.weight": mat(N_EMBD, HEAD_DIM * N_HEAD * 2),
                  p + "attn_k.weight": mat(N_EMBD, HEAD_DIM * N_HEAD_KV),
                  p + "attn_v.weight": mat(N_EMBD, HEAD_DIM * N_HEAD_KV),
                  p + "attn_output.weight": mat(HEAD_DIM * N_HEAD, N_EMBD),
                  p + "attn_q_norm.weight": ones(HEAD_DIM), p + "attn_k_norm.weight": ones(HEAD_DIM)}
        t |= {p + "ffn_gate.weight": mat(N_EMBD, N_FF), p + "ffn_up.weight": mat(N_EMBD, N_FF),
              p + "ffn_down.weight": mat(N_FF, N_EMBD)}
    p = f"blk.{N_TRUNK}.nextn."
    t |= {p + "eh_proj.weight": mat(2 * N_EMBD, N_EMBD), p + "enorm.weight": ones(N_EMBD),
          p + "hnorm.weight": ones(N_EMBD), p + "shared_head_norm.weight": ones(N_EMBD)}
    return t


def write(path: Path, seed: int = 0) -> Path:
    """Write the model to ``path`` (through a temporary name: a cut run leaves no half file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    w = GGUFWriter(str(tmp), ARCH)
    w.add_name("tiny qwen35 with one MTP layer (random weights, specops tests)")
    w.add_block_count(N_TRUNK + 1)
    w.add_nextn_predict_layers(1)
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(N_ROT)
    w.add_rope_dimension_sections([11, 11, 10, 0])
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(SSM_CONV)
    w.add_ssm_state_size(SSM_STATE)
    w.add_ssm_group_count(SSM_GROUPS)
    w.add_ssm_time_step_rank(SSM_V_HEADS)
    w.add_ssm_inner_size(SSM_STATE * SSM_V_HEADS)
    w.add_full_attention_interval(2)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("test")
    w.add_token_list([f"tok_{i}" for i in range(N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    return finish(w, _tensors(np.random.default_rng(seed)), tmp, path)


def finish(w: GGUFWriter, tensors: dict[str, np.ndarray], tmp: Path, path: Path) -> Path:
    """Add the tensors, write the file under its temporary name and put it in place (a cut run leaves no half
    file): the last steps of every tiny test GGUF."""
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path


def cached() -> Path:
    """The model in the cache, written the first time."""
    path = default_path()
    return path if path.exists() else write(path)


if __name__ == "__main__":
    out = write(Path(sys.argv[1])) if len(sys.argv) > 1 else cached()
    print(out)
