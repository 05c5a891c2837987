"""Where specops keeps things outside the repository."""

from __future__ import annotations

import json
import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SPECOPS_CACHE`` or ``~/.cache/specops``: llama.cpp sources and builds, models, rootfs."""
    return Path(os.environ.get("SPECOPS_CACHE", Path.home() / ".cache" / "specops")).expanduser()


def write_whole(path: Path, data: str | bytes) -> None:
    """``data`` to ``path`` through a temporary file beside it and a rename: a reader, or a stop, never meets half
    of it; a write that fails leaves no temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


INSTALL_PREFIX = Path("/opt/llama.cpp/current")  # where roles/llama_cpp installs the build on a host


def llama_prefix(given: Path | None = None) -> Path:
    """The llama.cpp install a command uses: ``given`` (``--llama-prefix``), else ``$SPECOPS_LLAMA_PREFIX``, else the
    deployed install (/opt/llama.cpp/current). The lab's build is named by the lab (its scripts and tests pass the
    prefix), never guessed here."""
    if given is not None:
        return Path(given)
    env = os.environ.get("SPECOPS_LLAMA_PREFIX")
    return Path(env) if env else INSTALL_PREFIX


def build_backend(prefix: Path) -> str:
    """The backend a llama.cpp install was built for (``PREFIX/build-info.json``, written by ``specops build`` and
    the llama_cpp role); ``cpu`` where the file is missing or says nothing."""
    try:
        return str(json.loads((prefix / "build-info.json").read_text()).get("backend") or "cpu").lower()
    except (OSError, ValueError, AttributeError):
        return "cpu"
