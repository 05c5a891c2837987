"""The package's import structure (issue 41): no cycle among specops modules (function-level imports included),
and no product module imports the soak's report code but the soak's own commands."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

SRC = Path(__file__).resolve().parents[2] / "src"


def import_graph() -> dict[str, set[str]]:
    mods: dict[str, Path] = {}
    for p in SRC.rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specops"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[m].add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names if a.name in mods}
    return {m: {t for t in ts if t in mods and t != m} for m, ts in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                found.append(sorted([v, *comp]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]   # the check can fail


def test_only_the_soaks_own_commands_import_its_report_code():
    arrows = sorted((m, t) for m, ts in import_graph().items() for t in ts
                    if t.startswith("specops.soak.") and t.endswith("report") and not m.startswith("specops.soak"))
    assert arrows == [("specops.commands.saturate", "specops.soak.saturation_report"),
                      ("specops.commands.soak", "specops.soak.report")]


def test_no_function_in_src_is_over_80_lines():
    """Issue 41: a renderer of 233 lines became sections; keep every function short enough to read whole."""
    import ast

    src = Path(__file__).resolve().parents[2] / "src"
    long = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    long.append(f"{path.relative_to(src)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named parts: " + "; ".join(long)


def test_no_module_in_src_is_over_500_lines():
    """Issue 80: a 984-line drain and a 1,124-line fit became modules of one concern each; keep every module short
    enough to read whole (split by what it does, never by the count)."""
    long = [f"{p.relative_to(SRC)} ({n} lines)" for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 500]
    assert not long, "split these by concern: " + "; ".join(long)


def test_product_commands_carry_no_lab_path():
    """Issue 41 item 2: a product command's default build is the deployed install or what the caller names; the
    lab's build (~/.cache/specops/lab/...) is passed by the lab, never guessed by the product."""
    import os

    from specops.paths import INSTALL_PREFIX, llama_prefix

    src = Path(__file__).resolve().parents[2] / "src" / "specops"
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py") if '"lab"' in p.read_text()]
    assert not offenders, offenders
    old = os.environ.pop("SPECOPS_LLAMA_PREFIX", None)
    try:
        assert llama_prefix() == INSTALL_PREFIX
        assert llama_prefix(Path("/x")) == Path("/x")
        os.environ["SPECOPS_LLAMA_PREFIX"] = "/y"
        assert llama_prefix() == Path("/y")
    finally:
        os.environ.pop("SPECOPS_LLAMA_PREFIX", None)
        if old is not None:
            os.environ["SPECOPS_LLAMA_PREFIX"] = old
