"""specops.ggufmeta's header reader against the gguf library's own reader: every key, scalar and array, the same
values (string arrays are read by their extent, their strings only when asked); a header cut inside a string array
is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFReader, GGUFValueType

from specops.ggufmeta import GGUFError, read
from tests.unit.synthgguf import write_gguf

# strings the walk must keep apart: empty, multi-byte UTF-8, a NUL, one longer than 255 bytes
TOKENS = ["", "a", "Ġhello", "héllo", "日本語", "x\x00y", "z" * 300, *[f"t{i}" for i in range(200)]]


def library_values(path: Path) -> dict[str, object]:
    """Every key's value by the stock reader (its arrays element by element)."""
    out: dict[str, object] = {}
    for key, f in GGUFReader(path, "r").fields.items():
        if key.startswith("GGUF."):
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            out[key] = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data] \
                if f.types[-1] == GGUFValueType.STRING else [v for i in f.data for v in f.parts[i].tolist()]
        else:
            out[key] = f.contents()
    return out


def test_every_key_reads_as_the_library_reads_it(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", tokens=TOKENS, n_head_kv=[2, 2, 1, 1])
    info = read(path)
    expected = library_values(path)
    assert set(expected) == set(info.fields) | set(info.array_lengths)
    for key, value in expected.items():
        if key in info.array_lengths:
            assert info.array(key) == value, key
            assert info.array_lengths[key] == len(value), key
        else:
            assert info.get(key) == value, key
    assert info.array("tokenizer.ggml.tokens") == TOKENS
    assert info.array("no.such.key") is None


@pytest.mark.parametrize("where", [0.3, 0.7])
def test_a_header_cut_inside_the_string_array_is_refused_in_one_line(tmp_path: Path, where: float) -> None:
    path = write_gguf(tmp_path / "m.gguf", tokens=TOKENS)
    data = path.read_bytes()
    start = data.index(b"tokenizer.ggml.tokens")
    end = data.index(b"z" * 300) + 300   # past the longest string, inside the array
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:start + int((end - start) * where)])
    with pytest.raises(GGUFError) as err:
        read(cut)
    message = str(err.value)
    assert "\n" not in message and str(cut) in message
    assert "damaged or truncated GGUF header" in message and "download the file again" in message, message
