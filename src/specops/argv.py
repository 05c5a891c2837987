"""The one place where a profile becomes llama-server's argv.

The systemd unit (through the Ansible filter plugin), ``specops bench`` and ``specops soak`` all call
:func:`build_argv`. The spellings come from the knob table (:mod:`specops.knobs`), the only module that
spells llama-server flags; this one decides which knobs are written, in which order, and when. Every flag emitted is
checked against the capabilities of the binary that will run it, so a removed flag (``--draft-max``
on 2026 builds) or an unknown one fails here, at preflight, instead of in a systemd crash loop.
"""

from __future__ import annotations

import shlex

from specops.capabilities import Capabilities
from specops.knobs import DRAFT_TYPES, KNOBS, NGRAM_TYPES, SPEC, knob
from specops.profile import ServerProfile
from specops.unitfile import exec_line, is_number

# the draft-model knobs, in the order they are written after the draft model and its type
DRAFT_KNOBS = ("draft_n_max", "draft_n_min", "draft_p_min", "draft_ngl", "draft_threads", "draft_cache_type_k",
               "draft_cache_type_v")


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


def _flag(caps: Capabilities, name: str, era: str = SPEC) -> str:
    """The spelling of knob ``name`` this binary accepts; FlagError when it accepts none."""
    return _need(caps, name, *knob(name).spellings(era))


# the values of an on/off/auto setting (flash_attn) a build that has the flag as a plain switch can honour
SWITCH_ON, SWITCH_LEFT_OUT = ("on", "true", "1"), ("off", "false", "0", "auto")


def _valued(caps: Capabilities, p: ServerProfile, names: tuple[str, ...], era: str = SPEC) -> list[str]:
    """``FLAG VALUE`` for each knob of ``names`` the profile sets (``None`` = leave llama.cpp's default). Where the
    build has the flag as a switch (older builds: ``-fa`` alone turns flash attention on, later ``-fa on|off|auto``)
    "on" is the flag alone and "off"/"auto" leave it out (that build's default: off)."""
    args: list[str] = []
    for name in names:
        value = getattr(p, name)
        if value is None:
            continue
        flag = _flag(caps, name, era)
        if flag in caps.switches:
            word = str(value).lower()
            if word not in SWITCH_ON + SWITCH_LEFT_OUT:
                raise FlagError(f"{name}={value}: this llama-server build has {flag} as a switch without a value; "
                                f"use one of {', '.join(SWITCH_ON + SWITCH_LEFT_OUT)}")
            args += [flag] if word in SWITCH_ON else []
            continue
        args += [flag, f"{float(value):g}" if knob(name).type == "float" else str(value)]
    return args


def _speculative_args(p: ServerProfile, caps: Capabilities) -> list[str]:
    spec = p.effective_spec_type
    era = caps.spec_era
    spec_type = knob("spec_type")
    args: list[str] = []
    if spec == "none":
        # An explicit baseline: newer builds may turn n-gram speculation on by default.
        if caps.has_spec_type:
            args += [spec_type.flag, "none"]
        return args
    if (own_flag := spec_type.for_value(spec)) is not None:  # "default": llama.cpp's own config
        args.append(_need(caps, f"spec_type {spec}", own_flag))
        return args

    if spec in DRAFT_TYPES:
        args += [_need(caps, "draft model", *knob("draft_model").flags), str(p.draft_model)]
        if caps.has_spec_type:
            if caps.spec_types and spec not in caps.spec_types:
                raise FlagError(f"spec_type {spec} is not offered by this build ({', '.join(caps.spec_types)})")
            args += [spec_type.flag, spec]
        elif spec != "draft-simple":
            raise FlagError(f"spec_type {spec} needs a build with {spec_type.flag}; this one only has draft-simple")
        return args + _valued(caps, p, DRAFT_KNOBS, era)

    if spec in NGRAM_TYPES:
        if not caps.has_spec_type or (caps.spec_types and spec not in caps.spec_types):
            raise FlagError(f"spec_type {spec} is not offered by this build")
        args += [spec_type.flag, spec]
        for k in KNOBS:
            flag = k.for_spec_type(spec)
            value = getattr(p, k.name, None) if flag else None
            if flag is not None and value is not None:
                args += [_need(caps, k.name, flag), str(value)]
        return args
    raise FlagError(f"unsupported spec_type {spec}")


def _switch(caps: Capabilities, name: str, value: bool | None) -> list[str]:
    """A boolean knob: its flag when true, its off flag when false, nothing when unset."""
    k = knob(name)
    if value is None:
        return []
    spellings = k.flags if value else k.off_flags
    return [_need(caps, f"{name}={str(value).lower()}", *spellings)] if spellings else []


def build_argv(profile: ServerProfile, caps: Capabilities, binary: str = "llama-server") -> list[str]:
    """Return the full argv (binary first) for ``profile`` on a binary with ``caps``."""
    p = profile
    p.validate()
    argv: list[str] = [binary]
    for name in ("model", "host", "port", "ctx_size", "parallel"):  # always given
        argv += [_flag(caps, name), str(getattr(p, name))]
    argv += _valued(caps, p, ("ubatch_size", "ngl", "threads", "threads_batch", "flash_attn", "cache_type_k",
                              "cache_type_v"))
    argv += _switch(caps, "kv_unified", p.kv_unified)
    if p.repack is False:
        argv += _switch(caps, "repack", False)
    # builds from before the prompt cache have no --cache-ram and nothing to bound: the knob is skipped there
    if p.cache_ram_mib is not None and (flag := _pick(caps, *knob("cache_ram_mib").flags)):
        argv += [flag, str(p.cache_ram_mib)]
    if p.metrics:
        argv += _switch(caps, "metrics", True)
    if p.slots and _pick(caps, *knob("slots").flags):
        argv += _switch(caps, "slots", True)
    argv += _valued(caps, p, ("alias", "api_key_file"))
    if p.jinja:
        argv += _switch(caps, "jinja", True)
    argv += _speculative_args(p, caps)
    argv += check_extra_args(p.extra_args, caps)
    return argv


def check_extra_args(extra: list[str], caps: Capabilities) -> list[str]:
    """User-supplied extra arguments: every flag must exist and not be removed in this build."""
    for token in extra:
        if not token.startswith("-") or is_number(token):
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


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)


def systemd_line(argv: list[str], multiline: bool = False) -> str:
    """Quote argv for ``ExecStart=``; ``multiline`` puts each flag on its own continued line. The escaping is
    the unit template's own (:func:`specops.unitfile.exec_line`), so `specops argv --format systemd` prints
    what the role writes."""
    return exec_line(argv, multiline=multiline)
