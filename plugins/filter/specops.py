"""The roles' filters for llama-server and its build: each is a specops function (src/specops/filters/, one
module per concern), so the roles never spell llama-server flags or CMake options themselves, they ask the same
Python functions the CLI, bench and soak use. This file only gathers them (tests/unit/test_filter_seam.py)."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from specops.filters import argv, build, deploycheck, devices, profile, speedgate, unitfile


class FilterModule:
    def filters(self) -> dict:
        return {**argv.FILTERS, **devices.FILTERS, **profile.FILTERS, **unitfile.FILTERS, **build.FILTERS,
                **deploycheck.FILTERS, **speedgate.FILTERS}
