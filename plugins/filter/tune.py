"""Filters for roles/llama_server_tune (tasks/main.yml): specops.filters.tune (specops.tune)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from specops.filters import tune


class FilterModule:
    def filters(self) -> dict:
        return dict(tune.FILTERS)
