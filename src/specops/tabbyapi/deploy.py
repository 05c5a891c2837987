"""What roles/tabbyapi asks of specops.tabbyapi: the service's config.yml from the role's settings (as Ansible hands
them over: text where a number is meant, '' or 'None' for unset), whether TabbyAPI can use them (one line naming
the role variable), and whether a draft directory's vocabulary matches the target's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specops.fit import FitError
from specops.pair import PairInputError
from specops.tabbyapi.config import TabbyProfile, TabbyProfileError, render_config
from specops.tabbyapi.hfvocab import check_hf_pair

_INTS = ("draft_n_max", "ctx_size", "parallel", "port", "chunk_size", "ngram_match_min")
_LISTS = ("gpu_split", "draft_gpu_split", "autosplit_reserve")
# the role variable of a profile key where it is not tabbyapi_<key>
VARIABLES = {"model": "tabbyapi_target_model", "draft_model": "tabbyapi_draft_model"}


def _number(value: object) -> object:
    """Ansible hands templated values over as text: '16384' → 16384, '2.5' → 2.5; anything else unchanged."""
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
    return value


def role_values(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The role's profile with Ansible's text turned back into what TabbyProfile takes: '', 'None' -> None, numbers,
    lists of numbers, the tensor_parallel switch."""
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


def config(profile: Mapping[str, Any], check_dirs: bool = False) -> dict[str, Any]:
    """The config.yml dict for the role's profile (TabbyProfileError, FitError: the profile is unusable)."""
    return render_config(TabbyProfile.from_dict(role_values(profile), check_dirs=check_dirs))


def profile_problem(profile: Mapping[str, Any]) -> str:
    """'' when TabbyAPI can use the role's profile, else one line naming the role variable (``tabbyapi_<key>``)."""
    try:
        config(profile, check_dirs=False)
    except (TabbyProfileError, FitError) as exc:
        text = str(exc)
        key = next((k for k in sorted(profile, key=len, reverse=True) if text.startswith(k + " ")
                    or text.startswith(k + ":")), None)
        if key is None:
            return f"TabbyAPI profile: {text}"
        return f"{VARIABLES.get(key, 'tabbyapi_' + key)}={profile[key]!r}: {text[len(key):].lstrip(' :')}"
    return ""


def hf_pair_problem(target_dir: str, draft_dir: str, name: str = "", value: str = "") -> str:
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
