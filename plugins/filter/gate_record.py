"""The speed gate's record as a deploy reads it back (specops.speedgate.read_record): a file that is not a record
is named in one line and replaced, never a templating traceback."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def specops_gate_record(slurped: Any, path: str) -> dict[str, Any]:
    """``slurped``: an ansible.builtin.slurp result (a missing file: no content). -> {record, problem}."""
    from specops.speedgate import read_record  # its bench imports: only when asked

    content = slurped.get("content") if isinstance(slurped, dict) else None
    text = base64.b64decode(content).decode("utf-8", errors="replace") if content is not None else None
    record, problem = read_record(text, path)
    return {"record": record, "problem": problem}


class FilterModule:
    def filters(self) -> dict:
        return {"specops_gate_record": specops_gate_record}
