"""Filters for the llama-server command line (specops.argv, specops.capabilities): the argv a profile renders to on
a build, what a rendered argv says, and what an upgrade of the build changes."""

from __future__ import annotations

from typing import Any

from specops.argv import FlagError, build_argv, setting_in, spec_type_of
from specops.capabilities import Capabilities, parse
from specops.filters import refused
from specops.knobs import knob
from specops.profile import ProfileError, ServerProfile


def capabilities_of(help_text: str, version_text: str = "") -> dict[str, object]:
    return parse(help_text, version_text or "").to_dict()


def argv_of(profile: dict[str, Any], capabilities: dict[str, Any], binary: str = "llama-server") -> list[str]:
    with refused(ProfileError, FlagError, prefix="llama-server arguments: "):
        return build_argv(ServerProfile.from_dict(dict(profile)), Capabilities.from_dict(dict(capabilities)),
                          binary=binary)


def argv_spec_type(argv: list[str], draft_model: Any = None) -> str:
    """The speculative type a rendered llama-server argv runs (its spec type, default for llama.cpp's own config,
    draft-simple on a build without spec types when there is a draft model, else none)."""
    return spec_type_of([str(a) for a in argv or []], draft_model)


def argv_setting(argv: list[str], name: str, default: Any = None) -> Any:
    """The value llama-server setting ``name`` (a knob) has on the command line ``argv``, else ``default``."""
    return setting_in([str(a) for a in argv or []], str(name), default)


def knob_flags(name: str) -> list[str]:
    """Every spelling of one llama-server setting (the knob table), for host scripts that read a command line."""
    return list(knob(name).own_spellings)


def upgrade_diff(old_help: str, new_help: str, profile: dict[str, Any], old_label: str = "deployed",
                 new_label: str = "new") -> dict[str, Any]:
    from specops import upgradeguard  # on use: only the upgrade guard's task asks

    return upgradeguard.upgrade_diff(str(old_help), str(new_help), dict(profile), old_label, new_label)


FILTERS = {
    "specops_capabilities": capabilities_of,
    "specops_argv": argv_of,
    "specops_argv_spec_type": argv_spec_type,
    "specops_argv_setting": argv_setting,
    "specops_knob_flags": knob_flags,
    "specops_upgrade_diff": upgrade_diff,
}
