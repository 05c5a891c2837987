"""nvidia-smi's ``--format=csv[,noheader][,nounits]`` output: comma-separated cells, an optional header line
naming the columns (``memory.total [MiB]``), MiB figures. Shared by ``specops fit`` (``--query-gpu``) and the
exporter (``--query-compute-apps``); each decides what its header must contain and how to read a row."""

from __future__ import annotations

import re
from collections.abc import Callable

_HEADER_CELL = re.compile(r"[A-Za-z_][\w.]*(\s*\[[^\]]*\])?")
MIB_CELL = re.compile(r"(\d+)(?:\s*MiB)?", re.ASCII | re.IGNORECASE)  # "81559" or "81559 MiB"


def csv_cells(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def header_names(cells: list[str]) -> list[str] | None:
    """Column names, lower-case and without units, if ``cells`` has the shape of a header line; else None."""
    if not all(_HEADER_CELL.fullmatch(c) for c in cells):
        return None
    return [re.sub(r"\s*\[.*\]$", "", c).lower() for c in cells]


def read_table(text: str, header_of: Callable[[list[str]], list[str] | None]) -> tuple[list[str] | None,
                                                                                       list[tuple[str, list[str]]]]:
    """The header ``header_of`` finds in the first non-blank line (or None), and the other lines with their cells."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = header_of(csv_cells(lines[0])) if lines else None
    return header, [(line, csv_cells(line)) for line in (lines[1:] if header else lines)]
