"""Where specops keeps things outside the repository."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SPECOPS_CACHE`` or ``~/.cache/specops``: llama.cpp sources and builds, models, rootfs."""
    return Path(os.environ.get("SPECOPS_CACHE", Path.home() / ".cache" / "specops")).expanduser()
