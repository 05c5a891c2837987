"""The host-scripts zip: :mod:`specops.host` and the package modules it imports, as one file that a host's own
python3 runs with the standard library only (``python3 host-scripts-ID.pyz drain ARGS``).

ansible.builtin.script ships one file, and the host scripts share modules, so the deploy ships them zipped. Built on
the controller from the checkout's package (roles/specops_package/tasks/host_scripts.yml runs ``python -m
specops.hostzip DIR`` with the checkout's src/ first on PYTHONPATH; the deploy lock's callback and the tests call
:func:`build`). The zip holds::

    __main__.py            runs specops.host's dispatch (specops/host/__main__.py)
    specops/__init__.py    the package's own: it imports nothing
    specops/keyfile.py     the one reader of API key files (SHARED: every specops module the host code imports)
    specops/host/**/*.py   (the drain is a package: specops/host/drain/)

Its members carry a fixed date, so the same sources make the same bytes; it is named by their digest
(``host-scripts-<12 hex>.pyz``) and written whole under another name before it gets that one, so that runs from
other checkouts sharing the cache never mix or see half a file. Standard library only."""

from __future__ import annotations

import hashlib
import io
import os
import sys
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent   # src/specops
SHARED = ("__init__.py", "keyfile.py")       # tests/unit/test_host_code.py: all that specops.host imports of specops
INTERPRETER = b"#!/usr/bin/env python3\n"     # so that ansible.builtin.script may also run it without an executable
MAIN = b"from specops.host.__main__ import main\n\nmain()\n"
EPOCH = (1980, 1, 1, 0, 0, 0)


def members(package: Path = PACKAGE) -> dict[str, bytes]:
    """Name in the zip -> content, for the package at ``package`` (a src/specops directory)."""
    found = {"__main__.py": MAIN}
    found.update({f"specops/{name}": (package / name).read_bytes() for name in SHARED})
    host = package / "host"   # its modules and its packages' (specops/host/drain/)
    found.update({f"specops/host/{p.relative_to(host).as_posix()}": p.read_bytes() for p in sorted(host.rglob("*.py"))})
    return found


def archive(package: Path = PACKAGE) -> bytes:
    """The zip's bytes: the interpreter line, then the members in name order, each with the same fixed date."""
    buf = io.BytesIO()
    buf.write(INTERPRETER)
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in sorted(members(package).items()):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def build(directory: Path | str, package: Path = PACKAGE) -> Path:
    """The zip in ``directory``, named by its digest; written (whole, then renamed) only when not there yet."""
    data = archive(package)
    out = Path(directory) / f"host-scripts-{hashlib.sha256(data).hexdigest()[:12]}.pyz"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m specops.hostzip DIR  (prints the path of the zip it made or found in DIR)",
              file=sys.stderr)
        return 2
    print(build(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
