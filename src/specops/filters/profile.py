"""Filters for the role's settings as a profile (specops.profile, specops.knobs): the settings' variables, the profile
they make (with the tune's choice), whether a spec type loads a draft model, and the models a deploy fetches."""

from __future__ import annotations

from typing import Any

from specops import profile
from specops.filters import refused, refusing
from specops.knobs import uses_draft_model
from specops.profile import ProfileError


def knob_vars(_: Any = None) -> list[str]:
    """The role variables of every llama-server setting, in the knob table's order (``llama_server_<name>``)."""
    return profile.role_vars()


def knob_profile(values: list[Any], backend: str | None = None, tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    with refused(ProfileError, prefix="specops_knob_profile: "):
        return profile.role_profile(list(values), backend, tuned)


def models_wanted(models: list[Any], target: str, draft: str, spec_type: Any) -> list[dict[str, Any]]:
    """The entries of specops_models this deploy fetches and installs: the draft's left out where the spec type
    loads no draft model (unless it is the target too)."""
    return profile.models_wanted([dict(m) for m in models or []], str(target or ""), str(draft or ""), spec_type)


FILTERS = {
    "specops_knob_vars": knob_vars,
    "specops_knob_profile": knob_profile,
    "specops_uses_draft_model": uses_draft_model,
    "specops_models_wanted": models_wanted,
    "specops_model_file": refusing(profile.model_file, ProfileError),
}
