"""Ansible's module payloads (AnsiballZ) kept between deploys, on the controller.

Before a worker sends a module to a host, Ansible zips the module with every ``module_utils`` file it imports,
found by parsing them (``recursive_finder``). It keeps the zip for the rest of the run only, in its per-run local
temp dir (``<local_tmp>/ansiballz_cache/<module fqn>-<compression>``). Every deploy therefore parsed the same
files again: about 2.6 s of the controller's CPU on a no-op deploy of the lab's profile, profiled here (py-spy).

:func:`restore` copies the kept payloads into this run's cache before the first task, and :func:`keep` saves the
new ones after the last. Only ansible-core's own modules (``ansible.modules.*``, whose source is a file of the
installed ansible-core) are kept. They sit under a key of the ansible-core version, the Python version and every
module and ``module_utils`` file of that install (path, size, mtime). An upgrade or an edited file starts a new
key, and a module of a collection or a role is never kept. A kept payload that does not decode as a zip is skipped
(Ansible builds it again). This is speed only: what a host runs is what Ansible would have built."""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import sys
import zipfile
from pathlib import Path

from specops.paths import write_whole

CACHE_DIR = "ansiballz_cache"  # Ansible's own name for it, under its per-run local temp dir
PREFIX = "ansible.modules."


def key(ansible_root: Path, version: str) -> str:
    """The install's signature: ansible-core's version, this Python's, and every file under ``modules`` and
    ``module_utils`` (relative path, size, mtime in ns)."""
    h = hashlib.sha256(f"{version}\0{sys.version}\0".encode())
    for sub in ("modules", "module_utils"):
        for dirpath, dirnames, filenames in os.walk(ansible_root / sub):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath, name)
                st = path.stat()
                h.update(f"{path.relative_to(ansible_root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return f"{version}-{h.hexdigest()[:16]}"


def builtin(name: str, ansible_root: Path) -> bool:
    """A payload file name (``ansible.modules.command-ZIP_DEFLATED``) of a module that is a file of ansible-core
    itself (Ansible names a role's own module ``ansible.modules.<name>`` too: that one is not kept)."""
    fqn, dash, _compression = name.rpartition("-")
    if not dash or not fqn.startswith(PREFIX):
        return False
    module = fqn[len(PREFIX):]
    return module.isidentifier() and (ansible_root / "modules" / f"{module}.py").is_file()


def valid(data: bytes) -> bool:
    """A payload as Ansible writes it: a zip, base64-encoded."""
    try:
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(data, validate=True))) as zf:
            return zf.testzip() is None
    except (binascii.Error, zipfile.BadZipFile, ValueError):
        return False


def restore(kept: Path, run_cache: Path, ansible_root: Path) -> int:
    """Copy the valid kept payloads of ansible-core's modules into this run's cache (none replaced); how many."""
    return copy_new(kept, run_cache, ansible_root)


def keep(run_cache: Path, kept: Path, ansible_root: Path) -> int:
    """Save this run's payloads of ansible-core's modules that are not kept yet; how many."""
    return copy_new(run_cache, kept, ansible_root)


def copy_new(src: Path, dst: Path, ansible_root: Path) -> int:
    """Copy the valid payloads of ansible-core's modules in ``src`` that ``dst`` lacks (written whole; ``dst``
    made where one is copied); how many."""
    if not src.is_dir():
        return 0
    n = 0
    for path in sorted(src.iterdir()):
        if not builtin(path.name, ansible_root) or (dst / path.name).exists():
            continue
        data = path.read_bytes()
        if valid(data):
            dst.mkdir(parents=True, exist_ok=True)
            write_whole(dst / path.name, data)
            n += 1
    return n
