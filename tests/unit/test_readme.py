"""The README is a manual (issue 80 item 5): it starts with the two commands, stays under 250 lines, no paragraph (or
list item) runs over 120 words and no table cell over 40; the reference detail lives in the roles' READMEs and
docs/design.md. Every relative link in it leads to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_LINES = 250
MAX_PARAGRAPH_WORDS = 120
MAX_CELL_WORDS = 40


def prose_blocks(text: str) -> list[str]:
    """The README's paragraphs and list items, code blocks and tables left out."""
    blocks, current, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        starts_item = bool(re.match(r"^(\s*[-*]|\s*\d+\.)\s", line))
        if fenced or not line.strip() or line.startswith(("#", "|")) or starts_item:
            if current:
                blocks.append(" ".join(current))
            current = [line] if (starts_item and not fenced) else []
            continue
        current.append(line)
    if current:
        blocks.append(" ".join(current))
    return blocks


def cells(text: str) -> list[str]:
    return [c.strip() for line in text.splitlines() if line.startswith("|") for c in line.strip("|").split("|")]


def words(text: str) -> int:
    return len(re.findall(r"\S+", text))


def test_the_readme_starts_with_the_two_commands():
    text = README.read_text()
    first = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[0] for line in first] == ["scripts/demo", "scripts/test"], first
    assert text.index("```bash") < text.index("\n## "), "the two commands come before the first section"


def test_the_readme_is_short_enough_to_read_whole():
    lines = README.read_text().splitlines()
    assert len(lines) < MAX_LINES, f"README.md has {len(lines)} lines: move reference detail to a role README or docs/"


def test_no_paragraph_or_table_cell_runs_on():
    text = README.read_text()
    long = [(words(b), b[:80]) for b in prose_blocks(text) if words(b) > MAX_PARAGRAPH_WORDS]
    assert not long, f"paragraphs over {MAX_PARAGRAPH_WORDS} words: {long}"
    wide = [(words(c), c[:80]) for c in cells(text) if words(c) > MAX_CELL_WORDS]
    assert not wide, f"table cells over {MAX_CELL_WORDS} words: {wide}"


def test_the_limits_see_what_they_measure():
    """The counting itself: a long paragraph, a long list item and a long cell are found; code is not prose."""
    long = " ".join(["word"] * 130)
    text = f"{long}\n\n- {long}\n\n```bash\n{long}\n```\n\n| a | b |\n| --- | --- |\n| {' '.join(['w'] * 41)} | x |\n"
    assert [words(b) for b in prose_blocks(text)] == [130, 131]
    assert max(words(c) for c in cells(text)) == 41


def test_every_relative_link_leads_to_a_file():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    missing = [link for link in links if not link.startswith("http") and not (REPO / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
