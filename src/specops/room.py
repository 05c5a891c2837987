"""Does the deploy have room on the host: disk for the models and the build, a context the models were trained for.

Each is checked in deploy.yml's first play, before anything is built, copied or restarted, each problem one line
naming the variable, the figures and the fix:

- **disk**: every file the deploy will write (each model not already on the host at its size, the build), grouped
  by the filesystem that receives it (from the host's ``specops.host.disk_facts``), against that filesystem's free space
  less a margin. Ansible copies a model through a temporary directory: the models role keeps that directory on
  the models' own filesystem, so each model needs its size once there.
- **MTP head**: ``draft-mtp`` (alone or in a list) drafts with the target's own multi-token-prediction layers, which
  llama.cpp reads from ``<arch>.nextn_predict_layers`` in the target's GGUF header; a target without them has no
  head to build the MTP draft context from, and is refused here.
- **context**: each slot's context (``ctx_size / parallel``; the whole ``ctx_size`` with one slot) against the
  training context (``<arch>.context_length``) in the target's and draft's GGUF headers. llama.cpp only logs
  "possible training context overflow" and serves text that degrades past it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1 << 20

# What a build adds on the host (the unpacked install and its .tar.gz on the way), by backend: upper estimates
# (a CPU install of the pinned tree is ~60 MiB; the GPU ones carry their runtime libraries).
BUILD_ESTIMATE_MIB = {"cpu": 150, "metal": 150, "vulkan": 250, "opencl": 250, "cuda": 2500, "hip": 2500,
                      "rocm": 2500, "sycl": 2500, "musa": 2500}

ALLOW_CTX = "llama_server_allow_ctx_beyond_training"


def build_estimate(backend: object) -> int:
    """Bytes a build of ``backend`` adds on a host (an upper estimate; a backend not listed: the largest)."""
    return BUILD_ESTIMATE_MIB.get(str(backend or "cpu"), max(BUILD_ESTIMATE_MIB.values())) * MIB


class HeaderError(ValueError):
    """A model's GGUF header that a check of the deploy could not read: one line naming the check."""


def _mib(n: float) -> str:
    return f"{n / MIB:,.0f} MiB"


def disk_problems(host: str, facts: dict[str, Any], margin_mib: int) -> list[str]:
    """One line per filesystem that cannot take what the deploy writes there (``facts`` from disk_facts.py)."""
    by_fs: dict[Any, dict[str, Any]] = {}
    for item in facts.get("items", []):
        item = {**item, "size": int(item["size"]), "free": int(item["free"])}
        if item.get("present_size") == item["size"]:
            continue                      # already there at its size: the copy is skipped
        fs = by_fs.setdefault(item["dev"], {"mount": item["mount"], "free": item["free"], "items": [],
                                            "dirs": set()})
        fs["items"].append(item)
        fs["dirs"].add(item["variable"])
    problems = []
    margin = margin_mib * MIB
    for fs in by_fs.values():
        need = sum(i["size"] for i in fs["items"])
        if need + margin <= fs["free"]:
            continue
        parts = " + ".join(f"{i['what']} {_mib(i['size'])}" for i in fs["items"])
        names = " or ".join(sorted(fs["dirs"]))
        problems.append(
            f"{names}: not enough disk on {host}: the filesystem at {fs['mount']} has {_mib(fs['free'])} free and "
            f"this deploy writes {_mib(need)} there ({parts}) + llama_server_disk_margin_mib {margin_mib}; free "
            f"{_mib(need + margin - fs['free'])} there or point {names} at a larger filesystem (nothing was copied)")
    return problems


@dataclass(frozen=True)
class Trained:
    role: str       # target | draft
    path: str
    arch: str
    context_length: int


def trained(role: str, path: str | Path) -> Trained:
    from specops.ggufmeta import read  # gguf + numpy: only when asked

    info = read(path, check_data=False)
    return Trained(role, str(path), info.arch, int(info.arch_get("context_length", 0) or 0))


def per_slot(ctx_size: int, parallel: int, train: int) -> int:
    """The context each slot gets: ctx_size 0 is the model's own (training) context."""
    total = ctx_size or train
    return total // max(1, parallel)


def context_problems(ctx_size: int, parallel: int, models: list[Trained]) -> list[str]:
    """One line per model whose training context is shorter than a slot's context."""
    problems = []
    for m in models:
        if m.context_length <= 0 or not ctx_size:
            continue
        slot = per_slot(ctx_size, parallel, m.context_length)
        if slot > m.context_length:
            how = f"{ctx_size} / llama_server_parallel {parallel} = {slot} per slot" if parallel > 1 else str(ctx_size)
            problems.append(
                f"llama_server_ctx_size={ctx_size}: each slot gets {how} tokens of context, but the {m.role} "
                f"{Path(m.path).name} ({m.arch}) was trained for {m.context_length} "
                f"({m.arch}.context_length): past it llama.cpp only logs 'possible training context overflow' and "
                f"the text degrades. Set llama_server_ctx_size <= {m.context_length * max(1, parallel)}, or "
                f"{ALLOW_CTX}: true to serve it anyway (warned on every deploy)")
    return problems


def context_check(models: Mapping[str, object], ctx_size: int, parallel: int) -> list[str]:
    """:func:`context_problems` of the deploy's models: ``models`` is {"target": controller path, "draft": controller
    path or ""} ("" = not read: no draft, or a file installed some other way)."""
    try:
        read = [trained(role, str(path)) for role, path in models.items() if path]
    except (OSError, ValueError) as exc:
        raise HeaderError(f"cannot read a model's GGUF header for the context check: {exc}") from exc
    return context_problems(ctx_size, parallel, read)


MTP_TYPE = "draft-mtp"
SPEC_TYPE_VAR = "llama_server_spec_type"


def mtp_problems(spec_type: str, target: str | Path) -> list[str]:
    """One line when ``spec_type`` has draft-mtp and the target's GGUF header has no ``<arch>.nextn_predict_layers``
    (or 0 of them): llama.cpp's MTP draft context is built from those layers of the target."""
    from specops.ggufmeta import read  # gguf + numpy: only when asked
    from specops.knobs import spec_type_members

    if MTP_TYPE not in spec_type_members(spec_type):
        return []
    info = read(target, check_data=False)
    key = f"{info.arch}.nextn_predict_layers"
    layers = info.get(key)
    if layers is not None and int(layers) > 0:
        return []
    has = f"{key} = {int(layers)}" if layers is not None else f"no {key}"
    return [f"{SPEC_TYPE_VAR}={spec_type!r}: draft-mtp drafts with the target's own multi-token-prediction layers, but "
            f"the target {Path(target).name} ({info.arch}) has {has} in its GGUF header; deploy a target converted "
            f"with its MTP layers (e.g. qwen35, glm4-moe, deepseek2) or set {SPEC_TYPE_VAR} to a type without "
            "draft-mtp (an n-gram type such as ngram-mod, or draft-simple with specops_models_draft)"]


def mtp_check(target: object, spec_type: object) -> list[str]:
    """:func:`mtp_problems` as the deploy asks: ``target`` is the target's controller path ("" = not read: a file
    installed some other way)."""
    if not target:
        return []
    try:
        return mtp_problems(str(spec_type or ""), str(target))
    except (OSError, ValueError) as exc:
        raise HeaderError(f"cannot read the target's GGUF header for the draft-mtp check: {exc}") from exc


EAGLE3_TYPE = "draft-eagle3"
EAGLE3_ARCH = "eagle3"


def eagle3_problems(spec_type: str, target: str | Path, draft: str | Path) -> list[str]:
    """One line each, before anything changes: draft-eagle3 with a draft that is no EAGLE-3 model, or one trained for
    another target (its ``eagle3.target_hidden_size`` is not the target's hidden size, a layer it reads from is not in
    the target, its vocabulary is not the target's); and an EAGLE-3 draft under a type that would load it as an
    ordinary draft model (draft-simple runs it without the target's hidden states it was trained on)."""
    from specops.ggufmeta import read  # gguf + numpy: only when asked
    from specops.knobs import spec_type_members

    if not draft:
        return []
    dinfo = read(draft, check_data=False)
    members = spec_type_members(spec_type)
    name = Path(draft).name
    if EAGLE3_TYPE not in members:
        if dinfo.arch == EAGLE3_ARCH and any(m in ("auto", "draft-simple") for m in members):
            return [f"{SPEC_TYPE_VAR}={spec_type!r}: the draft {name} is an EAGLE-3 model (architecture eagle3), which "
                    "drafts from the target's hidden states; loaded as an ordinary draft model it drafts nonsense. Set "
                    f"{SPEC_TYPE_VAR}: draft-eagle3"]
        return []
    if dinfo.arch != EAGLE3_ARCH:
        return [f"{SPEC_TYPE_VAR}={spec_type!r}: draft-eagle3 needs an EAGLE-3 draft (architecture eagle3), but "
                f"the draft {name} is a {dinfo.arch} model; give the EAGLE-3 GGUF converted for this target "
                "(convert_hf_to_gguf.py --target-model-dir), or set "
                f"{SPEC_TYPE_VAR}: draft-simple for an ordinary draft"]
    tinfo = read(target, check_data=False)
    return _eagle3_mismatch(spec_type, name, dinfo, Path(target).name, tinfo)


def eagle3_check(target: object, spec_type: object, draft: object) -> list[str]:
    """:func:`eagle3_problems` as the deploy asks: ``target``, ``draft`` are controller paths ("" = not read: a file
    installed some other way, or no draft)."""
    if not target or not draft:
        return []
    try:
        return eagle3_problems(str(spec_type or ""), str(target), str(draft))
    except (OSError, ValueError) as exc:
        raise HeaderError(f"cannot read a model's GGUF header for the draft-eagle3 check: {exc}") from exc


def _eagle3_mismatch(spec_type: str, name: str, dinfo: Any, target_name: str, tinfo: Any) -> list[str]:
    head = f"{SPEC_TYPE_VAR}={spec_type!r}: the EAGLE-3 draft {name} was made for another target than {target_name}"
    fix = "; give the EAGLE-3 draft trained for this target (its hidden states are what it reads)"
    hidden, n_embd = dinfo.get(f"{EAGLE3_ARCH}.target_hidden_size"), tinfo.arch_get("embedding_length")
    if hidden is None:
        return [f"{head}: it has no {EAGLE3_ARCH}.target_hidden_size in its GGUF header{fix}"]
    if int(hidden) != int(n_embd or 0):
        return [f"{head}: it reads hidden states of size {int(hidden)} ({EAGLE3_ARCH}.target_hidden_size), the "
                f"target's are {n_embd} ({tinfo.arch}.embedding_length){fix}"]
    layers = [int(x) for x in dinfo.array(f"{EAGLE3_ARCH}.target_layers") or []]
    n_layer = int(tinfo.arch_get("block_count") or 0) - int(tinfo.arch_get("nextn_predict_layers", 0) or 0)
    beyond = [x for x in layers if x > n_layer]
    if len(layers) != 3 or beyond:
        return [f"{head}: it reads target layers {layers} ({EAGLE3_ARCH}.target_layers), the target has {n_layer}{fix}"]
    vocab_d = dinfo.array_lengths.get("tokenizer.ggml.tokens")
    vocab_t = tinfo.array_lengths.get("tokenizer.ggml.tokens")
    if vocab_d != vocab_t:
        return [f"{head}: its vocabulary has {vocab_d} tokens, the target's {vocab_t}{fix}"]
    return []
