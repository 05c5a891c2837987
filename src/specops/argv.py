"""The one place where a profile becomes llama-server's argv.

The systemd unit (through the Ansible filter plugin), ``specops bench`` and ``specops soak`` all call
:func:`build_argv`. The spellings come from the knob table (:mod:`specops.knobs`), the only module that
spells llama-server flags, and each knob there says how it is written (its ``render``: always, valued, a switch, a
speculative setting, the extra arguments) and in which order (:func:`specops.knobs.argv_order`); this module writes
them so, with the speculation's rules (which types take the draft model and which settings). Every flag emitted is
checked against the capabilities of the binary that will run it, so a removed flag (``--draft-max``
on 2026 builds) or an unknown one fails here, at preflight, instead of in a systemd crash loop.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from specops.capabilities import Capabilities
from specops.knobs import (
    ALWAYS,
    DRAFT,
    DRAFT_TYPES,
    EXTRA,
    GENERAL,
    NGRAM_TYPES,
    SPEC,
    SPECULATIVE,
    SWITCH_OFF,
    SWITCH_ON,
    VALUED,
    Knob,
    argv_order,
    knob,
    uses_draft_model,
)
from specops.profile import ServerProfile
from specops.unitfile import exec_line, is_number


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
WORDS_ON, WORDS_LEFT_OUT = ("on", "true", "1"), ("off", "false", "0", "auto")


def _text(k: Knob, value: object) -> str:
    """A value as llama-server is given it (a float without trailing zeros: 0.8, 1)."""
    return f"{float(value):g}" if k.type == "float" else str(value)  # type: ignore[arg-type]


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
            if word not in WORDS_ON + WORDS_LEFT_OUT:
                raise FlagError(f"{name}={value}: this llama-server build has {flag} as a switch without a value; "
                                f"use one of {', '.join(WORDS_ON + WORDS_LEFT_OUT)}")
            args += [flag] if word in WORDS_ON else []
            continue
        args += [flag, _text(knob(name), value)]
    return args


def _names(kind: str, mtp_only: bool = False) -> tuple[str, ...]:
    """The knobs rendered as ``kind``, in the command line's order (``mtp_only``: those draft-mtp's head takes)."""
    return tuple(k.name for k in argv_order((kind,)) if k.mtp or not mtp_only)


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
                *_valued(caps, p, _names(DRAFT), era)]
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
        draft_args = _valued(caps, p, _names(DRAFT, mtp_only=not uses_draft_model(spec)), era)
        written.update(a for a in draft_args if a.startswith("-"))
        args += draft_args
    for member in (m for m in members if m in NGRAM_TYPES):
        for k in argv_order():
            flag = k.for_spec_type(member)
            value = getattr(p, k.name, None) if flag else None
            if flag is not None and value is not None and flag not in written:
                args += [_need(caps, k.name, flag), str(value)]
                written.add(flag)
    return args + _valued(caps, p, _names(SPECULATIVE))  # benchmarking only: imposed acceptance


def _switch_side(k: Knob, value: object) -> bool | None:
    """Which flag a bool knob's value writes as its render says: True its flag, False its off flag, None nothing.
    ``switch``: either, nothing when unset; ``on``: the flag when true; ``off``: the off flag when false."""
    if value is None:
        return None
    if k.render == SWITCH_ON:
        return True if value else None
    if k.render == SWITCH_OFF:
        return False if value is False else None
    return bool(value)


def _switch(caps: Capabilities, k: Knob, value: object) -> list[str]:
    """A boolean knob: the flag its value and render pick (:func:`_switch_side`); skipped where the build lacks it
    and the knob is ``if_built``."""
    side = _switch_side(k, value)
    spellings = () if side is None else k.flags if side else k.off_flags
    if not spellings or (k.if_built and _pick(caps, *spellings) is None):
        return []
    return [_need(caps, f"{k.name}={str(side).lower()}", *spellings)]


def _general(caps: Capabilities, p: ServerProfile, k: Knob) -> list[str]:
    """One knob of the general kinds (:data:`specops.knobs.GENERAL`), as the table declares it."""
    value = getattr(p, k.name)
    if k.render == ALWAYS:
        return [_flag(caps, k.name, caps.spec_era), _text(k, value)]
    if k.render != VALUED:
        return _switch(caps, k, value)
    # a setting newer than some builds (the prompt cache's --cache-ram): skipped where the build lacks it
    if value is None or (k.if_built and _pick(caps, *k.spellings(caps.spec_era)) is None):
        return []
    return _valued(caps, p, (k.name,), caps.spec_era)


def build_argv(profile: ServerProfile, caps: Capabilities, binary: str = "llama-server") -> list[str]:
    """Return the full argv (binary first) for ``profile`` on a binary with ``caps``: every knob of the table as its
    ``render`` says, in :func:`specops.knobs.argv_order` (the general settings, the speculation, the extra
    arguments)."""
    p = profile
    p.validate()
    argv: list[str] = [binary]
    for k in argv_order(GENERAL):
        argv += _general(caps, p, k)
    argv += _speculative_args(p, caps)
    for k in argv_order((EXTRA,)):
        argv += check_extra_args(getattr(p, k.name), caps)
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


def setting_in(argv: Sequence[str], name: str, default: object = None) -> object:
    """The value knob ``name`` is given on the command line ``argv`` (``FLAG VALUE``, the first of its spellings of any
    era), else ``default``: the role reads the running server's port so."""
    spellings = knob(name).own_spellings
    return next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in spellings), default)


def spec_type_of(argv: Sequence[str], draft_model: object = None) -> str:
    """The speculative type a command line of :func:`build_argv` runs (the units' descriptions, the speed gate's
    record): its spec type's value, ``default`` for llama.cpp's own config, else draft-simple where the profile has a
    draft model (a build from before spec types), else none."""
    spec_type = knob("spec_type")
    if spec_type.flag in argv:
        return argv[list(argv).index(spec_type.flag) + 1]
    return next((value for value, flag in spec_type.value_flags if flag in argv),
                "draft-simple" if draft_model else "none")


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)


def systemd_line(argv: list[str], multiline: bool = False) -> str:
    """Quote argv for ``ExecStart=``; ``multiline`` puts each flag on its own continued line. The escaping is
    the unit template's own (:func:`specops.unitfile.exec_line`), so `specops argv --format systemd` prints
    what the role writes."""
    return exec_line(argv, multiline=multiline)
