"""Copied into each lab host's rootfs as specops_lab_zipcache.py, with a .pth that imports it at every python3
start (specops_lab.labhost), and, for the Pythons the test suite starts on the controller (the modules Ansible runs
there itself), into the cache as a ``sitecustomize`` first on their PYTHONPATH (tests/lab.py controller_zipcache).
Lab equipment: the product roles never install it.

Ansible runs every module from a zip (AnsiballZ), and Python compiles the sources it imports from a zip on every
import, caching nothing (it has no __pycache__ there): ~45 ms of CPU a module run on a lab host, ~1500 module runs a
suite run. This keeps the compiled code, keyed by the source's hash, under /var/cache/specops-lab-pyc -- what
Python's own __pycache__ does for files -- and names the importing zip in it (tracebacks stay right)."""

import _imp
import marshal
import os
import sys
import zipimport

_CACHE = os.path.join(os.environ.get("SPECOPS_LAB_PYC", "/var/cache/specops-lab-pyc"), sys.implementation.cache_tag)
# a Python without this private hook (not the lab's Debian 3.11) just compiles as before
_compile = getattr(zipimport, "_compile_source", None)


def _cached(pathname, source):
    import hashlib
    path = os.path.join(_CACHE, hashlib.blake2b(source, digest_size=16).hexdigest())
    try:
        with open(path, "rb") as fh:
            code = marshal.load(fh)
        _imp._fix_co_filename(code, pathname)
        return code
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(_CACHE, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as fh:
            marshal.dump(code, fh)
        os.replace(tmp, path)
    except OSError:
        pass
    return code


if _compile is not None:
    zipimport._compile_source = _cached
