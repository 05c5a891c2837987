"""Filters for roles/tabbyapi (specops.tabbyapi.deploy, specops.deploycheck): the same functions the CLI renders
with; an unusable profile fails the task in one line."""

from __future__ import annotations

from typing import Any

from specops import deploycheck
from specops.filters import refused
from specops.fit import FitError
from specops.tabbyapi import deploy
from specops.tabbyapi.config import TabbyProfileError


def tabbyapi_config(profile: dict[str, Any], check_dirs: bool = False) -> dict[str, Any]:
    """The config.yml dict for a profile."""
    with refused(TabbyProfileError, FitError, prefix="TabbyAPI profile: "):
        return deploy.config(dict(profile), check_dirs=check_dirs)


def tabbyapi_input_problems(values: dict[str, Any], specs: dict[str, Any]) -> list[str]:
    """One line per TabbyAPI setting that is wrong (types and choices from the argument specs, ranges, paths, what
    its unit can hold); [] when all is well."""
    return deploycheck.check_tabbyapi_inputs(dict(values), dict(specs))


def tabbyapi_host_problems(facts: dict[str, Any], host: str, tokens_file: str, port: int | str,
                           our_units: list[str], models: dict[str, Any]) -> list[str]:
    """One line per problem on the host: api_tokens.yml (present, root-only, both keys set), the port, the model
    directories (config.json and tokenizer.json readable by the service user)."""
    return deploycheck.check_tabbyapi_host(dict(facts), host, str(tokens_file), int(port), list(our_units),
                                           {str(k): str(v or "") for k, v in dict(models).items()})


FILTERS = {
    "specops_tabbyapi_config": tabbyapi_config,
    "specops_tabbyapi_profile_problem": deploy.profile_problem,
    "specops_hf_pair_problem": deploy.hf_pair_problem,
    "specops_tabbyapi_input_problems": tabbyapi_input_problems,
    "specops_tabbyapi_host_problems": tabbyapi_host_problems,
}
