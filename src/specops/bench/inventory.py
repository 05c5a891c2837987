"""Write the recommendation as inventory variables for the service role, and apply them.

The file (default ``inventory/group_vars/llama_servers/speculative.yml``) holds the
``llama_server_*`` knobs the service role renders through :func:`specops.argv.build_argv`.
``--apply`` then runs the deploy playbook with that file as extra vars, so the deployed unit
changes even when the inventory lives elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from specops.knobs import bench_knobs
from specops.saturation_verdict import meaning

DEFAULT_VARS_FILE = Path("inventory/group_vars/llama_servers/speculative.yml")


class ApplyError(RuntimeError):
    pass


def inventory_vars(
    arm_def: Mapping[str, Any],
    threads: int | None,
    draft_threads: int | None,
    derived_draft: str | None = None,
) -> dict[str, Any]:
    """``llama_server_*`` variables for an arm (``spec_type: none`` for the baseline)."""
    prof = dict(arm_def.get("profile", {}))
    spec = prof.get("spec_type", "auto")
    if spec == "auto":
        spec = "draft-simple" if arm_def.get("draft") else "none"
    out: dict[str, Any] = {}
    for k in bench_knobs():
        value = prof.get(k.name)
        if k.name == "spec_type":
            value = spec
        elif k.name == "threads":
            value = threads
        elif k.name == "draft_threads":
            value = draft_threads if arm_def.get("draft") else None
        out[k.role_var] = value
    # the service role always knows a draft model; an arm without one must clear it, or the draft
    # would be loaded and never used (and the profile check refuses that combination)
    if not arm_def.get("draft"):
        out["llama_server_draft_model"] = ""
    out["llama_server_environment"] = dict(arm_def.get("env") or {})
    if derived_draft:
        # a re-quantised draft: the file exists where the bench ran; the service role must make or
        # copy it on each server (llama-quantize --allow-requantize DRAFT OUT TYPE)
        out["llama_server_draft_requantize"] = arm_def.get("draft")
        out["llama_server_draft_model_bench_path"] = derived_draft
    return out


def write_vars(path: Path, variables: Mapping[str, Any], header: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(dict(variables), sort_keys=False, default_flow_style=False)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"---\n{comment}{body}")
    os.replace(tmp, path)
    return path


def latest_saturation(reports_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest ``saturation-*.json`` beside the bench report (``specops saturate`` on this host), if any."""
    for path in sorted(reports_dir.glob("saturation-*.json"), reverse=True):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("levels"):
            return path, data
    return None


def header_for(arm: str, reason: str, rule: str, report: str,
               saturation: tuple[Path, dict[str, Any]] | None = None) -> str:
    head = (
        f"Written by `specops bench` on {time.strftime('%Y-%m-%d %H:%M:%S')} — do not edit by hand;\n"
        f"re-run the bench instead. Recommended arm: {arm} (rule '{rule}').\n{reason}\nEvidence: {report}\n"
        "Measured with one request at a time (one server slot). For a service with llama_server_parallel > 1 this\n"
    )
    if saturation is None:
        return head + (
            "says nothing about concurrency: run `specops saturate` (reports/saturation-*.md) at that N first; the\n"
            "deploy's speed gate says the same when it passes a speculative setting to a service with several slots.")
    path, data = saturation
    return head + (f"is not the answer; the saturation run on this host is ({path}):\n{meaning(data)}\n"
                   f"Deploy with llama_server_saturation_report: {path} and the speed gate quotes it at the "
                   "service's N.")


def apply(vars_file: Path, playbook: Path, inventory: Path | list[Path] | None,
          extra: list[str] | None = None) -> int:
    """Run the deploy playbook with the vars file as extra vars; returns its exit code."""
    if not playbook.exists():
        raise ApplyError(f"deploy playbook {playbook} not found; pass --playbook")
    exe = Path(sys.executable).with_name("ansible-playbook")
    cmd = [str(exe if exe.exists() else "ansible-playbook")]
    for inv in [inventory] if isinstance(inventory, Path) else inventory or []:
        cmd += ["-i", str(inv)]
    cmd += [str(playbook), "-e", f"@{vars_file}", *(extra or [])]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=False).returncode
