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
from specops.knobs import DRAFT_TYPES, KNOBS, NGRAM_TYPES, SPEC, knob, uses_draft_model
from specops.profile import ServerProfile
from specops.unitfile import exec_line, is_number

# the draft-model knobs (every draft_* knob of the table but the model itself), in the table's order, written after
# the draft model and its type: a new draft_* knob is rendered without a line here (draft_p_split was not, once)
DRAFT_KNOBS = tuple(k.name for k in KNOBS if k.name.startswith("draft_") and k.name != "draft_model")
# those that apply to draft-mtp without a draft model (the target's own head drafts)
MTP_KNOBS = ("draft_n_max", "draft_n_min", "draft_p_min")


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
    """The speculation's arguments: the draft model where a member of the type drafts with one, ``--spec-type``
    with the type or the list (one argument, ``a,b``: llama-server splits it), each member checked against the
    types the build lists, then each member's own settings (the draft knobs for the draft-* types, the n-gram
    spellings for the n-gram types; a flag two members share written once)."""
    spec = p.effective_spec_type
    members = p.spec_types
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

    if not caps.has_spec_type:
        if members != ("draft-simple",):
            raise FlagError(f"spec_type {spec} is not offered by this build: it has no {spec_type.flag}, only "
                            "draft-simple with a draft model; rebuild llama.cpp at a commit that has it")
        return [_need(caps, "draft model", *knob("draft_model").flags), str(p.draft_model),
                *_valued(caps, p, DRAFT_KNOBS, era)]
    missing = [m for m in members if caps.spec_types and m not in caps.spec_types]
    if missing:
        raise FlagError(f"spec_type {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not offered by this "
                        f"build (its {spec_type.flag} lists {', '.join(caps.spec_types)}); pick from those "
                        "(llama_server_spec_type in the role) or rebuild llama.cpp at a commit that has it")
    if uses_draft_model(spec):
        args += [_need(caps, "draft model", *knob("draft_model").flags), str(p.draft_model)]
    args += [spec_type.flag, spec]
    written: set[str] = set()
    if any(m in DRAFT_TYPES for m in members):
        # draft-mtp alone has no draft model: only the draft length and probability apply to its head
        names = DRAFT_KNOBS if uses_draft_model(spec) else MTP_KNOBS
        draft_args = _valued(caps, p, names, era)
        written.update(a for a in draft_args if a.startswith("-"))
        args += draft_args
    for member in (m for m in members if m in NGRAM_TYPES):
        for k in KNOBS:
            flag = k.for_spec_type(member)
            value = getattr(p, k.name, None) if flag else None
            if flag is not None and value is not None and flag not in written:
                args += [_need(caps, k.name, flag), str(value)]
                written.add(flag)
    return args + _valued(caps, p, ("spec_synth_rates",))  # benchmarking only: imposed acceptance


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
