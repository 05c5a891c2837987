"""Write the bench's choice as inventory variables for the service role, and apply them.

The file (default ``inventory/group_vars/llama_servers/speculative.yml``) holds the ``llama_server_*`` knobs the
service role renders through :func:`specops.argv.build_argv`; what they are for the chosen arm is the deploy's own
mapping (:func:`specops.tune.deploy.role_vars`), this module only writes them down. ``--apply`` then runs the deploy
playbook with that file as extra vars, so the deployed unit changes even when the inventory lives elsewhere.
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

from specops.saturation_verdict import meaning

DEFAULT_VARS_FILE = Path("inventory/group_vars/llama_servers/speculative.yml")


class ApplyError(RuntimeError):
    pass


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
        f"re-run the bench instead. Chosen by the tune's rule: {arm} (identity rule '{rule}').\n{reason}\n"
        f"Evidence: {report}\n"
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
