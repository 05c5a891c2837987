"""Cheaper drafts: re-quantise the draft model with the built ``llama-quantize``.

On slow hardware the draft's cost decides the speedup, so a smaller/faster quantisation of the
draft can win even if it is accepted a little less often. Derived files are cached under
``$SPECOPS_CACHE/models/derived/`` and written atomically; the source is re-quantised from its own
quantisation (``--allow-requantize``), which is what a user without the original weights can do.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from specops.paths import cache_dir


class QuantizeError(RuntimeError):
    pass


def derived_dir() -> Path:
    return cache_dir() / "models" / "derived"


def derived_path(source: Path, qtype: str, out_dir: Path | None = None) -> Path:
    return (out_dir or derived_dir()) / f"{source.stem}.requant-{qtype}.gguf"


def quantize_argv(binary: Path, source: Path, dest: Path, qtype: str, threads: int | None = None) -> list[str]:
    argv = [str(binary), "--allow-requantize", str(source), str(dest), qtype]
    if threads:
        argv.append(str(threads))
    return argv


def derive(
    binary: Path,
    source: Path,
    qtype: str,
    out_dir: Path | None = None,
    threads: int | None = None,
    timeout: float = 1800,
) -> Path:
    """Return the derived draft for ``qtype``, making it if it is not cached yet."""
    dest = derived_path(source, qtype, out_dir)
    if dest.exists() and dest.stat().st_size > 0 and dest.stat().st_mtime >= source.stat().st_mtime:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    proc = subprocess.run(
        quantize_argv(binary, source, tmp, qtype, threads),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise QuantizeError(f"llama-quantize to {qtype} failed ({proc.returncode}):\n{proc.stderr[-1500:]}")
    os.replace(tmp, dest)
    return dest
