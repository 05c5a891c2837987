"""A service profile rendered to TabbyAPI's ``config.yml`` (the ``network``, ``model`` and ``draft_model``
sections as TabbyAPI's ``common/config_models.py`` defines them at the pinned commit).

The profile speaks the llama.cpp profile's language where the two engines mean the same thing
(:class:`specops.profile.ServerProfile`): ``model`` and ``draft_model`` (paths; here model *directories*),
``spec_type`` (``auto``: a draft model when one is set, else none; ``none``; ``draft-simple`` → TabbyAPI
``draft_mode: model``; ``ngram-simple`` → ``draft_mode: ngram`` and ``draft-mtp`` → ``draft_mode: mtp``, the
target's own multi-token-prediction layers, both ExLlamaV3 only), ``draft_n_max`` →
``draft_num_tokens``, ``ctx_size`` → ``max_seq_len``, ``parallel`` → ``max_batch_size``, ``host``, ``port``.
What only TabbyAPI has keeps TabbyAPI's name: ``backend``, ``cache_mode``, ``draft_cache_mode``, ``gpu_split``
(GiB per GPU; empty = autosplit), ``draft_gpu_split``, ``autosplit_reserve`` (MiB), ``chunk_size``,
``tensor_parallel``.

Refused here, before anything is written (TabbyAPI itself would warn and carry on): a cache mode it does not
know, an ExLlamaV3 ``k,v`` cache mode on the exllamav2 backend (silently FP16 there), a draft directory without
``config.json``/``tokenizer.json``, n-gram or MTP drafting on exllamav2, MTP drafting for a target whose
``config.json`` names no MTP layers, a draft model with speculation off (TabbyAPI would load it and never use it),
and unknown profile keys.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from specops.fit import FitError
from specops.pair import PairInputError
from specops.tabbyapi.fit import CACHE_MODES, cache_bytes
from specops.tabbyapi.hfvocab import model_dir

BACKENDS = ("exllamav2", "exllamav3")
SPEC_TYPES = ("auto", "none", "draft-simple", "ngram-simple", "draft-mtp")
DRAFT_MODES = {"none": "disabled", "draft-simple": "model", "ngram-simple": "ngram", "draft-mtp": "mtp"}
# config.json keys that count a model's multi-token-prediction layers (Qwen3.5/3.6; DeepSeek V3, GLM-4.5)
MTP_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")


class TabbyProfileError(ValueError):
    """A profile TabbyAPI cannot run as asked; the message says what to change."""


@dataclass
class TabbyProfile:
    model: str
    draft_model: str | None = None
    spec_type: str = "auto"
    draft_n_max: int | None = None
    ctx_size: int = 4096
    parallel: int | None = None
    host: str = "127.0.0.1"
    port: int = 5000
    backend: str = "exllamav2"
    cache_mode: str = "FP16"
    draft_cache_mode: str = "FP16"
    gpu_split: list[float] = field(default_factory=list)
    draft_gpu_split: list[float] = field(default_factory=list)
    autosplit_reserve: list[float] = field(default_factory=lambda: [96.0])
    chunk_size: int = 2048
    tensor_parallel: bool = False
    ngram_match_min: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, check_dirs: bool = True) -> TabbyProfile:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise TabbyProfileError(f"unknown profile key(s) {unknown}; valid keys: {sorted(names)}")
        clean = {k: v for k, v in data.items() if v is not None and v != ""}
        if "model" not in clean:
            raise TabbyProfileError("profile needs 'model' (the target's model directory)")
        profile = cls(**clean)
        profile.validate(check_dirs=check_dirs)
        return profile

    @property
    def draft_mode(self) -> str:
        if self.spec_type == "auto":
            return "model" if self.draft_model else "disabled"
        return DRAFT_MODES[self.spec_type]

    def validate(self, *, check_dirs: bool = True) -> None:
        if self.backend not in BACKENDS:
            raise TabbyProfileError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.spec_type not in SPEC_TYPES:
            raise TabbyProfileError(f"spec_type {self.spec_type!r}: TabbyAPI can do {', '.join(SPEC_TYPES)}")
        mode = self.draft_mode
        if mode == "model" and not self.draft_model:
            raise TabbyProfileError("spec_type draft-simple needs draft_model (the draft's model directory)")
        if self.draft_model and mode != "model":
            raise TabbyProfileError(f"draft_model is set but spec_type is {self.spec_type}: TabbyAPI would load the "
                                    "draft and never use it. Use spec_type auto or draft-simple, or drop draft_model.")
        if mode == "ngram" and self.backend != "exllamav3":
            raise TabbyProfileError("spec_type ngram-simple needs backend exllamav3: TabbyAPI's exllamav2 backend has "
                                    "no n-gram drafting (there is no `ngram_decoding` key; unknown keys are ignored)")
        if mode == "mtp" and self.backend != "exllamav3":
            raise TabbyProfileError("spec_type draft-mtp needs backend exllamav3: TabbyAPI drafts with a model's MTP "
                                    "layers on ExLlamaV3 (draft_mode: mtp) only")
        try:
            cache_bytes(self.cache_mode, self.backend)
        except FitError as exc:
            raise TabbyProfileError(f"cache_mode: {exc}") from None
        if str(self.draft_cache_mode).upper() not in CACHE_MODES:
            raise TabbyProfileError(f"draft_cache_mode {self.draft_cache_mode!r}: TabbyAPI takes "
                                    f"{', '.join(CACHE_MODES)} for the draft")
        for name in ("ctx_size", "chunk_size", "port"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TabbyProfileError(f"{name} must be a positive integer, got {value!r}")
        if not 0 < self.port < 65536:
            raise TabbyProfileError(f"port {self.port} is out of range")
        for name in ("draft_n_max", "parallel", "ngram_match_min"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise TabbyProfileError(f"{name} must be a positive integer, got {value!r}")
        for name in ("gpu_split", "draft_gpu_split", "autosplit_reserve"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      and v >= 0 for v in value):
                raise TabbyProfileError(f"{name} must be a list of non-negative numbers, got {value!r}")
        if check_dirs:
            for role, path in (("model", self.model), ("draft_model", self.draft_model)):
                if path:
                    try:
                        model_dir(path)
                    except PairInputError as exc:
                        raise TabbyProfileError(f"{role}: {exc}") from None
            if mode == "mtp":
                _require_mtp(self.model)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _require_mtp(model: str) -> None:
    """draft-mtp: the target's config.json counts its MTP layers (else TabbyAPI has nothing to draft with)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise TabbyProfileError(f"model: cannot read {Path(model) / 'config.json'}: {exc}") from None
    layers = {k: config.get(k) or (config.get("text_config") or {}).get(k) for k in MTP_KEYS}
    if not any(isinstance(v, int) and v > 0 for v in layers.values()):
        raise TabbyProfileError(f"spec_type draft-mtp: the target {Path(model).name} has no MTP layers (its "
                                f"config.json has no {' or '.join(MTP_KEYS)} above 0); use a model exported with "
                                "its MTP head (Qwen3.5/3.6, DeepSeek V3, GLM-4.5), or spec_type ngram-simple")


def _split(path: str) -> tuple[str, str]:
    p = Path(path.rstrip("/"))
    return str(p.parent), p.name


def render_config(profile: TabbyProfile) -> dict[str, Any]:
    """The ``config.yml`` content as a dict (keys in TabbyAPI's order; unset knobs are left out)."""
    model_root, model_name = _split(profile.model)
    model: dict[str, Any] = {
        "model_dir": model_root, "model_name": model_name, "backend": profile.backend,
        "max_seq_len": profile.ctx_size, "cache_mode": str(profile.cache_mode).upper().replace(" ", ""),
        "tensor_parallel": profile.tensor_parallel,
        "gpu_split_auto": not profile.gpu_split, "autosplit_reserve": [float(v) for v in profile.autosplit_reserve],
        "gpu_split": [float(v) for v in profile.gpu_split], "chunk_size": profile.chunk_size,
    }
    if profile.parallel is not None:
        model["max_batch_size"] = profile.parallel
    draft: dict[str, Any] = {"draft_mode": profile.draft_mode}
    if profile.draft_model:
        draft_root, draft_name = _split(profile.draft_model)
        draft.update({"draft_model_dir": draft_root, "draft_model_name": draft_name,
                      "draft_cache_mode": str(profile.draft_cache_mode).upper(),
                      "draft_gpu_split": [float(v) for v in profile.draft_gpu_split]})
    if profile.draft_n_max is not None and profile.draft_mode != "disabled":
        draft["draft_num_tokens"] = profile.draft_n_max
    if profile.ngram_match_min is not None and profile.draft_mode == "ngram":
        draft["ngram_match_min"] = profile.ngram_match_min
    return {
        "network": {"host": profile.host, "port": profile.port, "disable_auth": False, "api_servers": ["oai"]},
        "logging": {"log_prompt": False, "log_generation_params": False, "log_requests": False},
        "model": model,
        "draft_model": draft,
        "developer": {"unsafe_launch": False},
    }
