"""The deploy's upgrade guard (roles/llama_server/tasks/upgrade_guard.yml): what changes between the llama-server
build a host runs and the one being deployed, read from their ``--help`` texts (specops.capdiff), and whether the
host's profile renders for the new build."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specops.capabilities import parse_help
from specops.capdiff import diff_help, profile_renders, render_text
from specops.profile import ProfileError, ServerProfile


def upgrade_diff(old_help: str, new_help: str, profile: Mapping[str, Any], old_label: str = "deployed",
                 new_label: str = "new") -> dict[str, Any]:
    """For a person (``text``: renames, removals, dropped spellings, changed defaults and speculative types one per
    line; added flags only counted) and for the deploy (``changes``; ``renders``, else ``reason``: a profile that is
    no profile does not render either)."""
    d = diff_help(old_help, new_help)
    text = render_text(d, old_label, new_label, list_added=False).rstrip("\n")
    try:
        renders, why = profile_renders(ServerProfile.from_dict(dict(profile)), parse_help(new_help))
    except ProfileError as exc:
        renders, why = False, str(exc)
    return {"changes": not d.empty, "text": text, "renders": renders,
            "reason": "" if renders else why.rstrip(". ")}
