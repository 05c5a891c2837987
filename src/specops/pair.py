"""Draft/target compatibility, as llama.cpp decides it, from the two GGUF headers.

The rules are those of ``common_speculative_are_compatible`` in ``common/speculative.cpp`` at llama.cpp
commit 0c1e57098, in its order:

1. the vocab types match (``tokenizer.ggml.model``: llama→SPM, gpt2→BPE, bert→WPM, t5→UGM, ...);
2. ``add_bos`` matches, and when it is set, the bos ids match;
3. ``add_eos`` matches, and when it is set, the eos ids match;
4. the vocab sizes differ by at most 128 (``SPEC_VOCAB_MAX_SIZE_DIFFERENCE``);
5. the token texts are identical from id 5 (``SPEC_VOCAB_CHECK_START_TOKEN_ID``) up to the smaller vocab.

``add_bos``/``add_eos``/bos/eos are resolved the way ``llama_vocab::impl::load`` (src/llama-vocab.cpp) does:
per-type defaults, a few pre-tokenizers that turn ``add_bos`` on, then the GGUF keys, which win.
Unlike llama.cpp (which stops at the first failed rule) every rule is evaluated so the report is complete.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specops.ggufmeta import GGUFInfo, read

LLAMA_CPP_COMMIT = "0c1e57098"
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
SMALL_SPEEDUP_RATIO = 1 / 3
NULL = -1

# tokenizer.ggml.model → (vocab type, default bos, default eos, default add_bos, default add_eos)
_VOCAB_TYPES: dict[str, tuple[str, int, int, bool, bool]] = {
    "no_vocab": ("NONE", NULL, NULL, False, False),
    "none": ("NONE", NULL, NULL, False, False),
    "llama": ("SPM", 1, 2, True, False),
    "bert": ("WPM", 101, NULL, True, False),
    "gpt2": ("BPE", 11, 11, False, False),
    "hybriddna": ("BPE", 11, 11, False, False),
    "whitespace": ("BPE", 11, 11, False, False),
    "gemma4": ("BPE", NULL, NULL, False, False),
    "t5": ("UGM", NULL, 1, False, True),
    "rwkv": ("RWKV", NULL, NULL, False, False),
    "test": ("TEST", NULL, NULL, False, False),
    "plamo2": ("PLAMO2", 1, 2, False, False),
}
# BPE pre-tokenizers for which llama.cpp turns add_bos on by default
_PRE_ADD_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                "jina-v5-nano", "tekken", "chameleon"}
# BPE pre-tokenizers for which llama.cpp has no bos token
_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}
# pre-tokenizers for which llama.cpp forces add_bos on after reading the keys (Gemma 4 workaround)
_PRE_FORCE_BOS = {"gemma4", "granite-embed-multi-311m"}


class PairInputError(ValueError):
    """A file cannot be used at all (missing, not GGUF, damaged, unknown tokenizer)."""


@dataclass
class Vocab:
    model: str
    pre: str
    type: str
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool
    tokens: list[str] = field(repr=False, default_factory=list)


def vocab_of(info: GGUFInfo) -> Vocab:
    model = info.get("tokenizer.ggml.model")
    if model is None:
        raise PairInputError(f"{info.path}: no tokenizer.ggml.model key: llama.cpp cannot load this vocab")
    model = str(model)
    if model not in _VOCAB_TYPES:
        raise PairInputError(f"{info.path}: unknown tokenizer {model!r}: llama.cpp {LLAMA_CPP_COMMIT} "
                             "refuses to load it")
    vtype, bos, eos, add_bos, add_eos = _VOCAB_TYPES[model]
    pre = str(info.get("tokenizer.ggml.pre", "gemma4" if model == "gemma4" else ""))
    if vtype == "BPE":
        if pre in _PRE_ADD_BOS:
            add_bos = True
        if pre in _PRE_NO_BOS:
            bos = NULL
    if vtype == "NONE":
        n = int(info.get("tokenizer.ggml.vocab_size", info.arch_get("vocab_size", 0)) or 0)
        tokens: list[str] = []
    else:
        raw = info.array("tokenizer.ggml.tokens")
        if raw is None:
            raise PairInputError(f"{info.path}: no tokenizer.ggml.tokens: llama.cpp cannot load this vocab")
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(raw)]
        n = len(tokens)
    # defaults out of range are disabled; keys in range override
    bos = bos if 0 <= bos < n else NULL
    eos = eos if 0 <= eos < n else NULL
    key_bos, key_eos = info.get("tokenizer.ggml.bos_token_id"), info.get("tokenizer.ggml.eos_token_id")
    if key_bos is not None and 0 <= int(key_bos) < n:
        bos = int(key_bos)
    if key_eos is not None and 0 <= int(key_eos) < n:
        eos = int(key_eos)
    if info.get("tokenizer.ggml.add_bos_token") is not None:
        add_bos = bool(info.get("tokenizer.ggml.add_bos_token"))
    if info.get("tokenizer.ggml.add_eos_token") is not None:
        add_eos = bool(info.get("tokenizer.ggml.add_eos_token"))
    if pre in _PRE_FORCE_BOS:
        add_bos = True
    return Vocab(model, pre, vtype, n, bos, eos, add_bos, add_eos, tokens)


@dataclass
class ModelSummary:
    path: str
    name: str | None
    architecture: str
    size_label: str | None
    n_params: int
    file_size: int
    tensor_bytes: int
    quant: str
    n_layer: int | None
    context_length: int | None
    embedding_length: int | None
    vocab_type: str
    vocab_size: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool


def summarize(info: GGUFInfo, vocab: Vocab) -> ModelSummary:
    return ModelSummary(
        path=str(info.path), name=info.get("general.name"), architecture=info.arch,
        size_label=info.get("general.size_label"), n_params=info.n_params, file_size=info.file_size,
        tensor_bytes=info.tensor_bytes, quant=info.file_type, n_layer=info.arch_get("block_count"),
        context_length=info.arch_get("context_length"), embedding_length=info.arch_get("embedding_length"),
        vocab_type=vocab.type, vocab_size=vocab.n_tokens, bos=vocab.bos, eos=vocab.eos,
        add_bos=vocab.add_bos, add_eos=vocab.add_eos,
    )


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class PairReport:
    target: ModelSummary
    draft: ModelSummary
    checks: list[Check]
    first_mismatch: dict[str, Any] | None
    warnings: list[str]
    elapsed_s: float

    @property
    def compatible(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"compatible": self.compatible, "llama_cpp_commit": LLAMA_CPP_COMMIT,
                "target": asdict(self.target), "draft": asdict(self.draft),
                "checks": [asdict(c) for c in self.checks], "first_mismatch": self.first_mismatch,
                "warnings": self.warnings, "elapsed_s": round(self.elapsed_s, 3)}


def first_token_mismatch(tgt: list[str], dft: list[str], start: int = SPEC_VOCAB_CHECK_START_TOKEN_ID
                         ) -> int | None:
    n = min(len(tgt), len(dft))
    if tgt[start:n] == dft[start:n]:
        return None
    return next(i for i in range(start, n) if tgt[i] != dft[i])


def _id(v: int) -> str:
    return "none" if v == NULL else str(v)


def compare(tv: Vocab, dv: Vocab) -> tuple[list[Check], dict[str, Any] | None, list[str]]:
    checks: list[Check] = []
    notes: list[str] = []
    checks.append(Check("vocab type", tv.type == dv.type,
                        f"target {tv.type} ({tv.model}), draft {dv.type} ({dv.model})"))
    for tok, add_t, add_d, id_t, id_d in (("bos", tv.add_bos, dv.add_bos, tv.bos, dv.bos),
                                          ("eos", tv.add_eos, dv.add_eos, tv.eos, dv.eos)):
        ok = add_t == add_d and (not add_t or id_t == id_d)
        ids = f"{tok} id {_id(id_t)}/{_id(id_d)}"
        if not (add_t and add_d):
            ids += " (ids compared only when added)"
        checks.append(Check(tok, ok, f"add_{tok} {str(add_t).lower()}/{str(add_d).lower()}, {ids} "
                            "(target/draft)"))
    eos_ok = checks[-1].ok
    if eos_ok and tv.eos != dv.eos:
        notes.append(f"eos ids differ ({_id(tv.eos)} vs {_id(dv.eos)}); llama.cpp does not check them when "
                     "add_eos is off, but the draft will not predict the target's end of generation")
    diff = abs(tv.n_tokens - dv.n_tokens)
    checks.append(Check("vocab size", diff <= SPEC_VOCAB_MAX_SIZE_DIFFERENCE,
                        f"{tv.n_tokens:,} vs {dv.n_tokens:,} tokens (difference {diff}, "
                        f"max {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})"))
    mismatch: dict[str, Any] | None = None
    start, end = SPEC_VOCAB_CHECK_START_TOKEN_ID, min(tv.n_tokens, dv.n_tokens)
    if tv.type == "NONE" or dv.type == "NONE":
        checks.append(Check("token text", False, "a model has no vocabulary; nothing to compare"))
    else:
        i = first_token_mismatch(tv.tokens, dv.tokens, start)
        if i is None:
            checks.append(Check("token text", True, f"identical from id {start} to {max(end - 1, start):,}"))
        else:
            mismatch = {"id": i, "target": tv.tokens[i], "draft": dv.tokens[i]}
            checks.append(Check("token text", False, f"first difference at id {i}: target {tv.tokens[i]!r}, "
                                f"draft {dv.tokens[i]!r} (ids {start}..{end - 1:,} must be identical)"))
    return checks, mismatch, notes


def check_pair(target: str | Path, draft: str | Path) -> PairReport:
    """Raise :class:`specops.ggufmeta.GGUFError` or :class:`PairInputError` for unusable input."""
    t0 = time.monotonic()
    ti, di = read(target), read(draft)
    tv, dv = vocab_of(ti), vocab_of(di)
    checks, mismatch, warnings = compare(tv, dv)
    ratio = di.file_size / ti.file_size if ti.file_size else 0.0
    if ratio > 1:
        warnings.insert(0, f"the draft ({di.file_size / 1e6:,.0f} MB) is larger than the target "
                        f"({ti.file_size / 1e6:,.0f} MB): are the arguments swapped?")
    elif ratio > SMALL_SPEEDUP_RATIO:
        warnings.insert(0, f"the draft is {ratio:.0%} of the target's size (more than a third): each draft "
                        "step costs too much, the speedup will be small")
    return PairReport(summarize(ti, tv), summarize(di, dv), checks, mismatch, warnings,
                      time.monotonic() - t0)


def _describe(role: str, m: ModelSummary) -> list[str]:
    params = f"{m.n_params / 1e9:.2f} B" if m.n_params >= 1e9 else f"{m.n_params / 1e6:.0f} M"
    pad = " " * 8
    return [
        f"{role:7} {m.path}",
        f"{pad}{m.architecture}, {m.name or '?'}: {params} params, {m.quant}, {m.file_size / 1e6:,.1f} MB, "
        f"{m.n_layer} layers, n_embd {m.embedding_length}, context {m.context_length}",
        f"{pad}vocab {m.vocab_type} {m.vocab_size:,} tokens, "
        f"bos {_id(m.bos)} (add {str(m.add_bos).lower()}), "
        f"eos {_id(m.eos)} (add {str(m.add_eos).lower()})",
    ]


def render(report: PairReport) -> str:
    lines = _describe("target", report.target) + _describe("draft", report.draft)
    lines.append(f"checks (llama.cpp common_speculative_are_compatible, {LLAMA_CPP_COMMIT}):")
    for c in report.checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:11} {c.detail}")
    lines += [f"warning: {w}" for w in report.warnings]
    if report.compatible:
        lines.append("result: compatible: llama-server will accept this draft for this target")
    else:
        first = next(c for c in report.checks if not c.ok)
        lines.append(f"result: INCOMPATIBLE ({first.name}): llama-server would refuse this pair "
                     "(\"the target and draft vocabs are not compatible\"); pick a draft from the target's "
                     "model family, with the same tokenizer")
    return "\n".join(lines)
