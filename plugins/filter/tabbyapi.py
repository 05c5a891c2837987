"""Ansible filters for roles/tabbyapi, backed by specops.tabbyapi (the CLI renders with the same functions)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.errors import AnsibleFilterError

from specops.deploycheck import check_tabbyapi_host, check_tabbyapi_inputs
from specops.fit import FitError
from specops.pair import PairInputError
from specops.tabbyapi.config import TabbyProfile, TabbyProfileError, render_config
from specops.tabbyapi.hfvocab import check_hf_pair

_INTS = ("draft_n_max", "ctx_size", "parallel", "port", "chunk_size", "ngram_match_min")
_LISTS = ("gpu_split", "draft_gpu_split", "autosplit_reserve")


def _number(value: object) -> object:
    """Ansible hands templated values over as text: '16384' → 16384, '2.5' → 2.5; anything else unchanged."""
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
    return value


def _coerce(profile: dict) -> dict:
    out = {k: (None if v in ("", "None", None) else v) for k, v in profile.items()}
    for key in _INTS:
        if out.get(key) is not None:
            out[key] = _number(out[key])
    for key in _LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_number(v) for v in out[key]]
    if isinstance(out.get("tensor_parallel"), str):
        out["tensor_parallel"] = out["tensor_parallel"].lower() in ("true", "yes", "1")
    return out


def specops_tabbyapi_config(profile: dict, check_dirs: bool = False) -> dict:
    """The config.yml dict for a profile; an unusable profile fails the task with one line."""
    try:
        return render_config(TabbyProfile.from_dict(_coerce(dict(profile)), check_dirs=check_dirs))
    except (TabbyProfileError, FitError) as exc:
        raise AnsibleFilterError(f"TabbyAPI profile: {exc}") from exc


_VARIABLES = {"model": "tabbyapi_target_model", "draft_model": "tabbyapi_draft_model"}


def specops_tabbyapi_profile_problem(profile: dict) -> str:
    """'' when TabbyAPI can use the profile, else one line naming the role variable (``tabbyapi_<key>``)."""
    try:
        render_config(TabbyProfile.from_dict(_coerce(dict(profile)), check_dirs=False))
    except (TabbyProfileError, FitError) as exc:
        text = str(exc)
        key = next((k for k in sorted(profile, key=len, reverse=True) if text.startswith(k + " ")
                    or text.startswith(k + ":")), None)
        if key is None:
            return f"TabbyAPI profile: {text}"
        return f"{_VARIABLES.get(key, 'tabbyapi_' + key)}={profile[key]!r}: {text[len(key):].lstrip(' :')}"
    return ""


def specops_hf_pair_problem(target_dir: str, draft_dir: str, name: str = "", value: str = "") -> str:
    """'' when the draft directory's vocabulary matches the target's, else the first failed check in one line
    (``name``: the variable to name, with ``value``, at the start of that line)."""
    try:
        report = check_hf_pair(target_dir, draft_dir)
    except PairInputError as exc:
        problem = str(exc)
    else:
        if report.compatible:
            return ""
        first = next(c for c in report.checks if not c.ok)
        problem = f"the draft does not match the target: {first.name}: {first.detail}"
    return f"{name}={value!r}: {problem}" if name else problem


def specops_tabbyapi_input_problems(values: dict, specs: dict) -> list[str]:
    """One line per TabbyAPI setting that is wrong (types and choices from the argument specs, ranges, paths, what
    its unit can hold); [] when all is well."""
    return check_tabbyapi_inputs(dict(values), dict(specs))


def specops_tabbyapi_host_problems(facts: dict, host: str, tokens_file: str, port: int | str, our_units: list[str],
                                   models: dict) -> list[str]:
    """One line per problem on the host: api_tokens.yml (present, root-only, both keys set), the port, the model
    directories (config.json and tokenizer.json readable by the service user)."""
    return check_tabbyapi_host(dict(facts), host, str(tokens_file), int(port), list(our_units),
                               {str(k): str(v or "") for k, v in dict(models).items()})


class FilterModule:
    def filters(self) -> dict:
        return {"specops_tabbyapi_config": specops_tabbyapi_config,
                "specops_hf_pair_problem": specops_hf_pair_problem,
                "specops_tabbyapi_input_problems": specops_tabbyapi_input_problems,
                "specops_tabbyapi_profile_problem": specops_tabbyapi_profile_problem,
                "specops_tabbyapi_host_problems": specops_tabbyapi_host_problems}
