"""The one place where a profile becomes llama-server's argv.

The systemd unit (through the Ansible filter plugin), ``specops bench`` and ``specops soak`` all call
:func:`build_argv`; nothing else in the project spells llama-server flags. Every flag emitted is
checked against the capabilities of the binary that will run it, so a removed flag (``--draft-max``
on 2026 builds) or an unknown one fails here, at preflight, instead of in a systemd crash loop.
"""

from __future__ import annotations

import shlex

from specops.capabilities import Capabilities
from specops.profile import DRAFT_TYPES, NGRAM_TYPES, ServerProfile


class FlagError(ValueError):
    """The profile asks for something this llama-server binary cannot do."""


def _pick(caps: Capabilities, *spellings: str) -> str | None:
    """The first spelling this binary accepts (new names first, old aliases after)."""
    for flag in spellings:
        if caps.has(flag):
            return flag
    return None


def _need(caps: Capabilities, what: str, *spellings: str) -> str:
    flag = _pick(caps, *spellings)
    if flag is None:
        removed = [s for s in spellings if s in caps.removed_flags]
        hint = f" ({', '.join(removed)} removed in this build)" if removed else ""
        raise FlagError(
            f"{what}: this llama-server build accepts none of {', '.join(spellings)}{hint}. "
            "Rebuild llama.cpp at a commit that supports it or drop the setting from the profile."
        )
    return flag


def _speculative_args(p: ServerProfile, caps: Capabilities) -> list[str]:
    spec = p.effective_spec_type
    era = caps.spec_era
    args: list[str] = []
    if spec == "none":
        # An explicit baseline: newer builds may turn n-gram speculation on by default.
        if caps.has_spec_type:
            args += ["--spec-type", "none"]
        return args
    if spec == "default":
        args.append(_need(caps, "spec_type default", "--spec-default"))
        return args

    if spec in DRAFT_TYPES:
        args += [_need(caps, "draft model", "--spec-draft-model", "-md", "--model-draft"), str(p.draft_model)]
        if caps.has_spec_type:
            if caps.spec_types and spec not in caps.spec_types:
                raise FlagError(f"spec_type {spec} is not offered by this build ({', '.join(caps.spec_types)})")
            args += ["--spec-type", spec]
        elif spec != "draft-simple":
            raise FlagError(f"spec_type {spec} needs a build with --spec-type; this one only has draft-simple")
        if era == "legacy":
            n_max, n_min, p_min = ("--draft-max", "--draft"), ("--draft-min",), ("--draft-p-min",)
        else:
            n_max, n_min, p_min = ("--spec-draft-n-max",), ("--spec-draft-n-min",), (
                "--spec-draft-p-min",
                "--draft-p-min",
            )
        if p.draft_n_max is not None:
            args += [_need(caps, "draft_n_max", *n_max), str(p.draft_n_max)]
        if p.draft_n_min is not None:
            args += [_need(caps, "draft_n_min", *n_min), str(p.draft_n_min)]
        if p.draft_p_min is not None:
            args += [_need(caps, "draft_p_min", *p_min), f"{float(p.draft_p_min):g}"]
        if p.draft_ngl is not None:
            args += [
                _need(caps, "draft_ngl", "--spec-draft-ngl", "-ngld", "--gpu-layers-draft"),
                str(p.draft_ngl),
            ]
        if p.draft_threads is not None:
            args += [_need(caps, "draft_threads", "--spec-draft-threads", "-td", "--threads-draft"),
                     str(p.draft_threads)]
        if p.draft_cache_type_k is not None:
            args += [_need(caps, "draft_cache_type_k", "--spec-draft-type-k", "-ctkd"), p.draft_cache_type_k]
        if p.draft_cache_type_v is not None:
            args += [_need(caps, "draft_cache_type_v", "--spec-draft-type-v", "-ctvd"), p.draft_cache_type_v]
        return args

    if spec in NGRAM_TYPES:
        if not caps.has_spec_type or (caps.spec_types and spec not in caps.spec_types):
            raise FlagError(f"spec_type {spec} is not offered by this build")
        args += ["--spec-type", spec]
        if spec == "ngram-mod":
            knobs = (("draft_n_max", "--spec-ngram-mod-n-max"), ("draft_n_min", "--spec-ngram-mod-n-min"),
                     ("ngram_size_n", "--spec-ngram-mod-n-match"))
        elif spec == "ngram-cache":
            knobs = (("draft_n_max", "--spec-draft-n-max"),)
        else:
            knobs = (("ngram_size_n", f"--spec-{spec}-size-n"), ("ngram_size_m", f"--spec-{spec}-size-m"),
                     ("ngram_min_hits", f"--spec-{spec}-min-hits"))
        for attr, flag in knobs:
            value = getattr(p, attr)
            if value is not None:
                args += [_need(caps, attr, flag), str(value)]
        return args
    raise FlagError(f"unsupported spec_type {spec}")


def build_argv(profile: ServerProfile, caps: Capabilities, binary: str = "llama-server") -> list[str]:
    """Return the full argv (binary first) for ``profile`` on a binary with ``caps``."""
    p = profile
    p.validate()
    argv: list[str] = [binary, _need(caps, "model", "--model", "-m"), p.model]
    argv += [_need(caps, "host", "--host"), p.host, _need(caps, "port", "--port"), str(p.port)]
    argv += [_need(caps, "ctx_size", "--ctx-size", "-c"), str(p.ctx_size)]
    argv += [_need(caps, "parallel", "--parallel", "-np"), str(p.parallel)]
    if p.ngl is not None:
        argv += [_need(caps, "ngl", "--gpu-layers", "-ngl", "--n-gpu-layers"), str(p.ngl)]
    if p.threads is not None:
        argv += [_need(caps, "threads", "--threads", "-t"), str(p.threads)]
    if p.threads_batch is not None:
        argv += [_need(caps, "threads_batch", "--threads-batch", "-tb"), str(p.threads_batch)]
    if p.flash_attn is not None:
        argv += [_need(caps, "flash_attn", "--flash-attn", "-fa"), p.flash_attn]
    if p.cache_type_k is not None:
        argv += [_need(caps, "cache_type_k", "--cache-type-k", "-ctk"), p.cache_type_k]
    if p.cache_type_v is not None:
        argv += [_need(caps, "cache_type_v", "--cache-type-v", "-ctv"), p.cache_type_v]
    if p.repack is False:
        argv.append(_need(caps, "repack=false", "--no-repack", "-nr"))
    # builds from before the prompt cache have no --cache-ram and nothing to bound: the knob is skipped there
    if p.cache_ram_mib is not None and (flag := _pick(caps, "--cache-ram", "-cram")):
        argv += [flag, str(p.cache_ram_mib)]
    if p.metrics:
        argv.append(_need(caps, "metrics", "--metrics"))
    if p.slots and _pick(caps, "--slots"):
        argv.append("--slots")
    if p.alias:
        argv += [_need(caps, "alias", "--alias", "-a"), p.alias]
    if p.api_key_file:
        argv += [_need(caps, "api_key_file", "--api-key-file"), p.api_key_file]
    if p.jinja:
        argv.append(_need(caps, "jinja", "--jinja"))
    argv += _speculative_args(p, caps)
    argv += check_extra_args(p.extra_args, caps)
    return argv


def check_extra_args(extra: list[str], caps: Capabilities) -> list[str]:
    """User-supplied extra arguments: every flag must exist and not be removed in this build."""
    for token in extra:
        if not token.startswith("-") or _is_number(token):
            continue
        flag = token.split("=", 1)[0]
        if flag in caps.removed_flags:
            raise FlagError(
                f"extra argument {flag} has been removed from this llama-server build; "
                "the server would exit 1 at start. See `llama-server --help` for its replacement."
            )
        if flag not in caps.flags:
            raise FlagError(f"extra argument {flag} is not a llama-server flag in this build")
    return list(extra)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)


def systemd_quote(arg: str) -> str:
    """Quote one word for a systemd command line (double quotes, ``%`` and ``$`` escaped)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if not escaped or any(c in escaped for c in " \t\"'\\;"):
        escaped = '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return escaped


def systemd_line(argv: list[str], multiline: bool = False) -> str:
    """Quote argv for ``ExecStart=``; ``multiline`` puts each flag on its own continued line."""
    if not multiline:
        return " ".join(systemd_quote(a) for a in argv)
    lines: list[list[str]] = [[]]
    for arg in argv:
        if arg.startswith("-") and lines[-1] and not _is_number(arg):
            lines.append([])
        lines[-1].append(systemd_quote(arg))
    return " \\\n    ".join(" ".join(words) for words in lines)
