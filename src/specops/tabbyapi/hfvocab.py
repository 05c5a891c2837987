"""Draft/target compatibility for Hugging Face model directories (EXL2/EXL3: ``config.json``,
``tokenizer.json``, ``tokenizer_config.json``), by the same rules and in the same report as the GGUF check
(:mod:`specops.pair`): vocab type, BOS/EOS (added or not, and their ids), vocab size within 128, token text
identical from id 5 on, the first difference named.

How a directory becomes a :class:`specops.pair.Vocab`:

- ``tokenizer.json`` ``model.vocab`` (a token→id map, or ``[piece, score]`` pairs for Unigram) plus
  ``added_tokens`` (which override and extend it); ids nobody names read ``[UNUSED_<id>]``;
- type: Unigram → UGM, WordPiece → WPM, BPE with ``byte_fallback`` (SentencePiece-style: Llama 2, Mistral) →
  SPM, other BPE (byte-level: GPT-2, Qwen, Llama 3) → BPE, as llama.cpp's converter maps them;
- BOS/EOS: ``tokenizer_config.json`` ``bos_token``/``eos_token`` (text or ``{"content": ...}``), else
  ``config.json`` ``bos_token_id``/``eos_token_id``; ``add_bos_token``/``add_eos_token`` from
  ``tokenizer_config.json``, else whether ``tokenizer.json``'s post-processor puts the BOS token first, else the
  type's default (SPM adds BOS, the others add nothing).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from specops.pair import (
    NULL,
    SMALL_SPEEDUP_RATIO,
    SPEC_VOCAB_MAX_SIZE_DIFFERENCE,
    ModelSummary,
    PairInputError,
    PairReport,
    Vocab,
    _describe,
    compare,
)

NEEDED = ("config.json", "tokenizer.json")
_WEIGHT_SUFFIXES = (".safetensors",)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PairInputError(f"{path}: cannot read it as JSON ({exc}); copy it again from the original model") \
            from None
    if not isinstance(data, dict):
        raise PairInputError(f"{path}: not a JSON object; copy it again from the original model")
    return data


def model_dir(path: str | Path) -> Path:
    """The directory, checked for the files ExLlama and TabbyAPI read; :class:`PairInputError` otherwise."""
    p = Path(path)
    if not p.is_dir():
        raise PairInputError(f"{p}: no such model directory (EXL2/EXL3 models are directories with "
                             "config.json, tokenizer.json and the *.safetensors)")
    for name in NEEDED:
        if not (p / name).is_file():
            raise PairInputError(f"{p} has no {name}: TabbyAPI cannot load it and its vocabulary cannot be checked; "
                                 f"copy {name} from the original (unquantised) model's repository")
    return p


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _config_id(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _post_processor_adds(tok: dict[str, Any], text: str | None) -> bool | None:
    post = tok.get("post_processor") or {}
    procs = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for proc in procs:
        if isinstance(proc, dict) and proc.get("type") == "TemplateProcessing":
            single = proc.get("single") or []
            first = single[0] if single else {}
            return bool(text) and first.get("SpecialToken", {}).get("id") == text
    return None


def vocab_of_dir(path: str | Path) -> tuple[Vocab, dict[str, Any]]:
    """The directory's vocabulary and its ``config.json``."""
    p = model_dir(path)
    config, tok = _load_json(p / "config.json"), _load_json(p / "tokenizer.json")
    tok_cfg = _load_json(p / "tokenizer_config.json") if (p / "tokenizer_config.json").is_file() else {}
    model = tok.get("model")
    if not isinstance(model, dict) or ("type" not in model and "vocab" not in model):
        raise PairInputError(f"{p / 'tokenizer.json'}: no model.vocab: not a Hugging Face tokenizers file")
    kind = str(model.get("type") or ("Unigram" if isinstance(model.get("vocab"), list) else "BPE"))
    ids: dict[int, str] = {}
    raw = model.get("vocab") or {}
    if isinstance(raw, list):  # Unigram: [[piece, score], ...], the id is the position
        ids.update({i: str(entry[0]) for i, entry in enumerate(raw)})
    elif isinstance(raw, dict):
        ids.update({int(i): str(t) for t, i in raw.items()})
    for added in tok.get("added_tokens") or []:
        ids[int(added["id"])] = str(added["content"])
    if not ids:
        raise PairInputError(f"{p / 'tokenizer.json'}: the vocabulary is empty")
    vtype = {"Unigram": "UGM", "WordPiece": "WPM"}.get(kind, "SPM" if model.get("byte_fallback") else "BPE")
    if kind not in ("Unigram", "WordPiece", "BPE", "WordLevel"):
        raise PairInputError(f"{p / 'tokenizer.json'}: unknown tokenizer model type {kind!r}")
    n = max(ids) + 1
    tokens = [ids.get(i, f"[UNUSED_{i}]") for i in range(n)]
    by_text = {t: i for i, t in sorted(ids.items(), reverse=True)}  # lowest id wins for duplicated texts

    def special(name: str) -> int:
        text = _token_text(tok_cfg.get(f"{name}_token"))
        if text is not None and text in by_text:
            return by_text[text]
        cid = _config_id(config.get(f"{name}_token_id"))
        return cid if cid is not None and 0 <= cid < n else NULL

    bos, eos = special("bos"), special("eos")
    add_bos = tok_cfg.get("add_bos_token")
    if add_bos is None:
        add_bos = _post_processor_adds(tok, tokens[bos] if bos != NULL else None)
    if add_bos is None:
        add_bos = vtype == "SPM"
    add_eos = bool(tok_cfg.get("add_eos_token", vtype == "UGM"))
    return Vocab(kind, "", vtype, n, bos, eos, bool(add_bos), add_eos, tokens), config


def _quant(config: dict[str, Any]) -> str:
    q = config.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    if method in ("exl2", "exl3") and q.get("bits") is not None:
        return f"{method.upper()} {float(q['bits']):g} bpw"
    return method.upper() or str(config.get("torch_dtype", "?"))


def summarize_dir(path: Path, vocab: Vocab, config: dict[str, Any]) -> ModelSummary:
    from specops.tabbyapi.fit import Shape  # the parameter count lives with the memory model

    weights = sum(f.stat().st_size for f in path.iterdir() if f.name.endswith(_WEIGHT_SUFFIXES))
    try:
        n_params = Shape.of(config, path.name).n_params
    except ValueError:
        n_params = 0
    return ModelSummary(
        path=str(path), name=path.name, architecture=str(config.get("model_type", "?")), size_label=None,
        n_params=n_params, file_size=weights, tensor_bytes=weights, quant=_quant(config),
        n_layer=config.get("num_hidden_layers"), context_length=config.get("max_position_embeddings"),
        embedding_length=config.get("hidden_size"), vocab_type=vocab.type, vocab_size=vocab.n_tokens,
        bos=vocab.bos, eos=vocab.eos, add_bos=vocab.add_bos, add_eos=vocab.add_eos,
    )


def check_hf_pair(target: str | Path, draft: str | Path) -> PairReport:
    """Raise :class:`PairInputError` for a directory that cannot be used at all."""
    t0 = time.monotonic()
    tv, tcfg = vocab_of_dir(target)
    dv, dcfg = vocab_of_dir(draft)
    checks, mismatch, warnings = compare(tv, dv)
    ts, ds = summarize_dir(Path(target), tv, tcfg), summarize_dir(Path(draft), dv, dcfg)
    tw, dw = ts.n_params or ts.file_size, ds.n_params or ds.file_size
    if tw and dw and dw > tw:
        warnings.insert(0, "the draft is larger than the target: are the arguments swapped?")
    elif tw and dw / tw > SMALL_SPEEDUP_RATIO:
        warnings.insert(0, f"the draft is {dw / tw:.0%} of the target's size (more than a third): each draft step "
                        "costs too much, the speedup will be small")
    t_size, d_size = tcfg.get("vocab_size"), dcfg.get("vocab_size")
    if isinstance(t_size, int) and isinstance(d_size, int) and abs(t_size - d_size) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        warnings.append(f"config.json vocab_size (the logits' width) differs: target {t_size:,}, draft {d_size:,}")
    return PairReport(ts, ds, checks, mismatch, warnings, time.monotonic() - t0)


def render_hf(report: PairReport) -> str:
    lines = _describe("target", report.target) + _describe("draft", report.draft)
    lines.append("checks (the rules of specops check-pair for GGUF: llama.cpp's common_speculative_are_compatible):")
    for c in report.checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:11} {c.detail}")
    lines += [f"warning: {w}" for w in report.warnings]
    if report.compatible:
        lines.append("result: compatible: the draft speaks the target's vocabulary token for token")
    else:
        first = next(c for c in report.checks if not c.ok)
        lines.append(f"result: INCOMPATIBLE ({first.name}): the draft's token ids mean other text to the target, "
                     "so TabbyAPI would accept almost none of its drafts; pick a draft from the target's model "
                     "family, with the same tokenizer")
    return "\n".join(lines)
