"""A server profile: what the operator wants llama-server to do, independent of flag spelling.

Profiles come from Ansible variables, YAML files or the bench harness. They are validated here
(unknown keys and impossible combinations are errors) and turned into argv by :mod:`specops.argv`.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, field, fields, make_dataclass
from typing import Any

from specops.devices import placement_problem
from specops.knobs import (
    CACHE_TYPES,
    DRAFT_MODEL_TYPES,
    DRAFT_TYPES,
    FLASH_ATTN,
    KNOBS,
    NGRAM_TYPES,
    PLACEMENT,
    SPEC_TYPES,
    SPLIT_MODES,
    Knob,
    knob,
    ranges,
    spec_type_members,
    spec_type_problem,
    uses_draft_model,
)
from specops.rpc import rpc_problem

__all__ = ["CACHE_TYPES", "DRAFT_MODEL_TYPES", "DRAFT_TYPES", "NGRAM_TYPES", "SPEC_TYPES", "ProfileError",
           "ServerProfile", "model_file", "models_wanted", "no_draft_why", "role_profile", "role_vars",
           "uses_draft_model"]


class ProfileError(ValueError):
    """A profile that cannot be rendered: says what is wrong and what to do."""


_PY_TYPES = {"int": "int", "float": "float", "str": "str", "bool": "bool", "raw": "int | str", "list": "list[str]"}


def _profile_fields(table: tuple[Knob, ...]) -> list[tuple[str, str] | tuple[str, str, Any]]:
    """The profile's fields from the knob table: one per knob, same name; the type from the knob's (optional unless
    the profile has a default of its own), the default its ``profile_default`` (None: llama.cpp's own)."""
    out: list[tuple[str, str] | tuple[str, str, Any]] = []
    for k in table:
        base = _PY_TYPES[k.type]
        if k.name == "model":
            out.append((k.name, base))  # required: the one setting without a default
        elif k.type == "list":
            out.append((k.name, base, field(default_factory=lambda d=k.profile_default: list(d or ()))))
        elif k.profile_default is None:
            out.append((k.name, f"{base} | None", field(default=None)))
        else:
            out.append((k.name, base, field(default=k.profile_default)))
    return out


class _Profile:
    """Everything that decides llama-server's command line.

    ``spec_type``: ``auto`` (draft-simple when a draft model is set, else none), ``none`` (an explicit
    baseline), ``default`` (llama.cpp's own ``--spec-default``), any speculative type, or a comma-separated list of
    speculative types (``draft-mtp,ngram-mod``: llama-server runs each). A draft model goes with the types that draft
    with one (:data:`specops.knobs.DRAFT_MODEL_TYPES`) and with no other: draft-mtp drafts with the target's own head.
    ``None`` means "leave llama.cpp's default" for every optional knob. One field per knob of
    :data:`specops.knobs.KNOBS`, same name, typed and defaulted from the table (:func:`_profile_fields`): a new
    llama-server setting is one entry there.
    """

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ProfileError(
                f"unknown profile key(s) {unknown}; valid keys: {sorted(names)}"
            )
        clean = {k: v for k, v in data.items() if v is not None and v != ""}
        if "model" not in clean:
            raise ProfileError("profile needs 'model' (path to the target GGUF)")
        profile = cls(**clean)
        profile.validate()
        return profile

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @property
    def effective_spec_type(self) -> str:
        """The type(s) the server runs: auto resolved, a list written as ``--spec-type`` takes it (``a,b``)."""
        if spec_type_members(self.spec_type) == ("auto",):
            return "draft-simple" if self.draft_model else "none"
        return ",".join(spec_type_members(self.spec_type))

    @property
    def spec_types(self) -> tuple[str, ...]:
        """The members of :attr:`effective_spec_type`."""
        return spec_type_members(self.effective_spec_type)

    @property
    def speculative(self) -> bool:
        return self.effective_spec_type != "none"

    def _check_ranges(self) -> None:
        """Each bounded setting within its knob's low..high (the knob table's ranges, as the preflight checks)."""
        for name, (low, high) in ranges().items():
            value = getattr(self, name, None)
            if value is None:
                continue
            whole = knob(name).type == "int"
            if isinstance(value, str):   # a number written as text (a templated Ansible value): its number
                with contextlib.suppress(ValueError):
                    value = int(value) if whole else float(value)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
                raise ProfileError(f"{name} must be {'an integer' if whole else 'a number'}, got {value!r}")
            if (low is not None and value < low) or (high is not None and value > high):
                span = f"within {low:g}..{high:g}" if low is not None and high is not None else (
                    f"at least {low:g}" if low is not None else f"at most {high:g}")
                raise ProfileError(f"{name} must be {span}, got {value!r}")

    def validate(self) -> None:
        st = self.spec_type
        problem = spec_type_problem(st)
        if problem:
            raise ProfileError(f"spec_type {st!r}: {problem}")
        eff = self.effective_spec_type
        with_model = [m for m in self.spec_types if m in DRAFT_MODEL_TYPES]
        if with_model and not self.draft_model:
            raise ProfileError(f"spec_type {eff} needs draft_model (path to the draft GGUF): {with_model[0]} drafts "
                               "with a separate draft model")
        if self.draft_model and not uses_draft_model(eff):
            raise ProfileError(
                f"draft_model is set but spec_type is {eff}, which loads no draft model ({no_draft_why(eff)}): "
                "the draft would be loaded and never used. Use spec_type auto or draft-simple, or drop draft_model."
            )
        self._check_ranges()
        if self.draft_n_max is not None and self.draft_n_min is not None and self.draft_n_min > self.draft_n_max:
            raise ProfileError(f"draft_n_min ({self.draft_n_min}) > draft_n_max ({self.draft_n_max})")
        if self.flash_attn is not None and self.flash_attn not in FLASH_ATTN:
            raise ProfileError(f"flash_attn must be on, off or auto, got {self.flash_attn!r}")
        for name in ("cache_type_k", "cache_type_v", "draft_cache_type_k", "draft_cache_type_v"):
            value = getattr(self, name)
            if value is not None and value not in CACHE_TYPES:
                raise ProfileError(f"{name} {value!r} is not one of {', '.join(CACHE_TYPES)}")
        if not isinstance(self.extra_args, list) or not all(isinstance(a, str) for a in self.extra_args):
            raise ProfileError("extra_args must be a list of strings")
        if self.split_mode is not None and self.split_mode not in SPLIT_MODES:
            raise ProfileError(f"split_mode {self.split_mode!r} is not one of {', '.join(SPLIT_MODES)}")
        # the placement on its own (the devices a build lists are checked where they are known: specops fit)
        problem = placement_problem({name: getattr(self, name) for name in PLACEMENT})
        if problem:
            raise ProfileError(problem)
        # the ggml-rpc-server endpoints' form (beyond loopback is the role's opt-in, llama_server_rpc_remote)
        problem = rpc_problem(getattr(self, "rpc", None), allow_remote=True)
        if problem:
            raise ProfileError(problem)


def profile_class(table: tuple[Knob, ...]) -> type:
    """The profile dataclass of a knob table: :data:`ServerProfile` is the real table's (a test builds one for a
    copy of the table with knobs of its own)."""
    return make_dataclass("ServerProfile", _profile_fields(table), bases=(_Profile,),
                          namespace={"__doc__": _Profile.__doc__, "__module__": __name__})


ServerProfile = profile_class(KNOBS)


def no_draft_why(spec_type: object) -> str:
    """Why a spec type that loads no draft model drafts without one (for the refusals)."""
    members = spec_type_members(spec_type)
    if members == ("none",):
        return "no speculation"
    if members == ("default",):
        return f"llama.cpp's {knob('spec_type').for_value('default')} is an n-gram config"
    parts = []
    if "draft-mtp" in members:
        parts.append("draft-mtp drafts with the target's own MTP head")
    if any(m in NGRAM_TYPES for m in members):
        parts.append("n-gram types draft from the text itself")
    return "; ".join(parts) or "it drafts without one"


def models_wanted(models: list[dict[str, Any]], target: str, draft: str, spec_type: object) -> list[dict[str, Any]]:
    """The entries of ``specops_models`` a deploy of ``spec_type`` fetches and installs: all of them, less the draft's
    (the entry named ``draft``; an entry's name defaults to its catalog name) when the type loads no draft model,
    unless the draft is the target too."""
    if not draft or draft == target or uses_draft_model(spec_type):
        return list(models)
    return [m for m in models if (m.get("name") or m.get("catalog")) != draft]


def role_vars() -> list[str]:
    """The role variables of every llama-server setting, in the knob table's order (``llama_server_<name>``)."""
    return [k.role_var for k in KNOBS if k.role]


def role_profile(values: list[Any], backend: str | None = None,
                 tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile (knob name -> value) from the values of :func:`role_vars`, in that order; a setting left null
    whose default differs per backend takes ``backend``'s from the knob table (or, for n-gram types that spell it
    with their own flag, llama.cpp's default for that type: the knob's :meth:`~specops.knobs.Knob.default_for`).
    ``tuned``: what the deploy's tune chose (role variable -> value, only settings the inventory left open), taken
    over the role's values (not set as facts: an extra var would silently outrank a fact)."""
    knobs = [k for k in KNOBS if k.role]
    if len(values) != len(knobs):
        raise ProfileError(f"{len(values)} values for {len(knobs)} settings")
    by_var = {k.role_var: k.name for k in knobs}
    unknown = sorted(set(tuned or {}) - set(by_var))
    if unknown:
        raise ProfileError(f"the tune set {', '.join(unknown)}, which is no setting")
    given = dict(zip((k.name for k in knobs), values, strict=True))
    given.update({by_var[var]: v for var, v in (tuned or {}).items()})
    return {k.name: (k.default_for(backend, given.get("spec_type")) if given[k.name] is None and k.backend_defaults
                     else given[k.name]) for k in knobs}


def model_file(name: str, models: list[dict[str, Any]] | None = None) -> str:
    """The file name a model (an entry of ``specops_models`` by its name or catalog name, else a catalog name) is
    stored under on the hosts: the entry's own ``file``, else its catalog model's."""
    for entry in models or []:
        if name in (entry.get("name"), entry.get("catalog")):
            if entry.get("file"):
                return str(entry["file"])
            name = entry.get("catalog") or name
            break
    from specops.fetch import catalog  # on use: the model catalog pulls in httpx and gguf (~0.15 s)

    known = catalog()
    if name not in known:
        raise ProfileError(f"model {name!r} is neither in specops_models nor in the catalog ({', '.join(known)})")
    return known[name].file
