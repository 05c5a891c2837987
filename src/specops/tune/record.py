"""What a tune's result depends on, as one key: the build, the models, the device, the service's slots
(``--parallel``) and the settings that change what is measured. The deploy keeps the host's last result and tunes
again only when the key moves (``specops tune --reuse``), saying what moved.

The same facts with each model by its content (size and sha256) instead of its path and mtime are the host's *kind*
(:func:`kind`): a record tuned on one host serves every host of the same kind (``specops tune --shared``,
:func:`refusal`, :func:`adopt`; the deploy's llama_server_tune_share)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specops import kinds
from specops.bench.tasks import STANDARD_SET
from specops.devices import DeviceError, list_devices

# the arguments that change what the tune measures or decides (not its budget, output or work dir)
SETTINGS = ("lengths", "ngram", "no_default", "rule", "threads", "ctx_size", "max_tokens", "probe_tokens",
            "probe_tasks", "limit_per_workload", "workloads", "top", "margin", "ceiling_depth", "synth_rates",
            "ngram_probes", "mix", "kinds")


def file_fact(path: Path | None) -> dict[str, Any] | None:
    """A model file as the key sees it: where, how big, when written (the models role rewrites a file only when
    its checksum changes)."""
    if path is None:
        return None
    st = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def sha256_arg(text: str) -> str:
    """``--target-sha256`` / ``--draft-sha256``: a model's sha256, 64 hex digits."""
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text.strip()):
        raise argparse.ArgumentTypeError(f"must be a sha256 (64 hex digits), got {text!r}")
    return text.strip().lower()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_fact(path: Path | None, sha256: str | None = None) -> dict[str, Any] | None:
    """A model file as the kind sees it: its content (size and sha256: the models role's verified one when given,
    else hashed here), wherever it lies and whenever it was written."""
    if path is None:
        return None
    return {"size": Path(path).stat().st_size, "sha256": sha256 or file_sha256(Path(path))}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def device_fact(server: Path, backend: str) -> str:
    """The device the build runs on: the GPUs llama-server lists (name, model, memory) for a GPU build, the CPU's
    model and count for a CPU build (a device that vanished reads differently, so it tunes again)."""
    if backend == "cpu":
        return f"cpu: {cpu_name()} x{os.cpu_count()}"
    try:
        devices, _ = list_devices(server)
    except DeviceError as exc:
        return f"{backend}: no device ({str(exc).splitlines()[0]})"
    return f"{backend}: " + "; ".join(f"{d.name} {d.description} {d.total_mib} MiB" for d in devices)


def parallel_arg(text: str) -> int:
    """``specops tune --parallel N``: the service's slots, a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be the service's slots (a whole number), got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 slot, got {n}")
    return n


def parallel_fact(args: argparse.Namespace) -> int:
    """The service's slots (``specops tune --parallel``, the role's llama_server_parallel; 1 when not given): a
    result is for the concurrency it was tuned at, so another N tunes again."""
    return int(getattr(args, "parallel", None) or 1)


def facts(prefix: Path, backend: str, args: argparse.Namespace, names: Sequence[str] = ()) -> dict[str, Any]:
    """What the result depends on (its key): the build, the models, the device, N, the settings, and the kinds of
    ``names`` (the candidates) that the table marks ``keyed`` (:mod:`specops.kinds`: those measured since the table,
    MTP and EAGLE-3; a record from before, whose candidates were of the earlier kinds only, keeps its key)."""
    try:
        info = json.loads((prefix / "build-info.json").read_text())
    except (OSError, ValueError):
        info = {}
    settings = {k: getattr(args, k, None) for k in SETTINGS}
    settings["synth_rates"] = list(settings["synth_rates"] or ())
    if settings["mix"] is None:  # no --mix: left out, so the results written before the setting keep their key
        del settings["mix"]
    settings["tasks"] = [hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16] for p in args.tasks or ()]
    if settings.get("kinds") in (None, "", "auto"):  # --kinds auto: left out, as --mix
        settings.pop("kinds", None)
    keyed = sorted({kinds.of(n).key for n in names if kinds.of(n).keyed})
    if keyed:
        settings["candidate_kinds"] = keyed
    return {"build": info.get("build_id") or str(prefix.resolve()), "target": file_fact(args.target),
            "draft": file_fact(args.draft), "device": device_fact(prefix / "bin" / "llama-server", backend),
            "parallel": parallel_fact(args), "settings": settings}


def task_source(paths: list[Path] | None) -> str:
    """Where the tune's tasks came from, for the record: the bench's standard set, or each --tasks file's name and
    sha256 prefix (never its content: prompts can be private)."""
    if not paths:
        return f"the bench's standard set ({STANDARD_SET})"
    return ", ".join(f"{Path(p).name} (sha256 {hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16]})"
                     for p in paths)


def key(found: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(found, sort_keys=True, default=str).encode()).hexdigest()[:16]


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What moved between an earlier result's facts and now's: 'build', 'target', 'draft', 'device', 'parallel'
    (a result older than the fact names it too: the slots it was tuned for are unknown), or the setting's name."""
    out = [k for k in ("build", "target", "draft", "device", "parallel") if old.get(k) != new.get(k)]
    was, now = old.get("settings") or {}, new.get("settings") or {}
    out += [f"setting {k}" for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
    return out


SHARED_WHY = "the build, the content of the models (size and sha256), the device, N and the settings are the same"


def kind(found: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The host's kind: ``found`` (:func:`facts`) with each model by its content (:func:`content_fact`, from
    ``--target-sha256`` / ``--draft-sha256`` when given) -> {key, facts}. Two hosts with the same build, the same
    model files, the same device, N and settings are of one kind, whatever the models' paths and mtimes."""
    out = {**found, "target": content_fact(args.target, getattr(args, "target_sha256", None)),
           "draft": content_fact(args.draft, getattr(args, "draft_sha256", None))}
    return {"key": key(out), "facts": out}


def refusal(theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    """Why another host's record (``theirs``) does not serve this host's kind (``mine``: :func:`kind`), in a few
    words; '' when it does."""
    was = theirs.get("kind") or {}
    if not was.get("key"):
        return "it has no kind key (tuned before records were shared)"
    if was["key"] == mine["key"]:
        return ""
    moved = changed(was.get("facts") or {}, mine["facts"])
    return f"it is of another kind ({', '.join(moved) or 'its key'} differ{'s' if len(moved) == 1 else ''})"


def same_source(current: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """``current`` (a host's result) is ``theirs`` adopted already: tuned on the same host at the same time."""
    share = current.get("shared") or {}
    return bool(share) and share.get("from") == str(theirs.get("tuned_on") or "another host") \
        and share.get("when") == theirs.get("when")


def adopt(theirs: Mapping[str, Any], found: Mapping[str, Any], mine: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Another host's record of this host's kind as this host's own: its choice and figures, this host's facts and
    key (so that ``--reuse`` keeps it until something here moves) and ``shared``: from which host, when it was tuned
    there, and why it applies here."""
    source = str(theirs.get("tuned_on") or "another host")  # the deploy names the host it keeps a record from
    return {**theirs, "facts": dict(found), "key": key(found), "kind": dict(mine), "retuned_because": [],
            "shared": {"from": source, "when": theirs.get("when"), "kind": mine["key"], "record": str(path),
                       "why": f"the same kind {mine['key']}: {SHARED_WHY}"}}


def previous(path: Path | None) -> dict[str, Any] | None:
    """An earlier result at ``path`` (None where there is none, or it is not a tune result)."""
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("chosen") and data.get("key") else None
