"""roles/exporter/README.md lists every series the exporter can emit (issue 64 item 6). Its table is written from the
series catalogue (src/specops/exporter/series.py, `specops exporter-series --update`); the collector builds each
family from that catalogue and from nowhere else; the golden expositions hold no series, label or help text the
catalogue lacks; and prometheus-client's process_* series are the ones its ProcessCollector gives."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import ProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from specops.commands import exporter_series
from specops.exporter import collector
from specops.exporter.engine import ENGINE_BY_NAME
from specops.exporter.llama_metrics import PER_POS_NAME
from specops.exporter.series import CATALOGUE, CLIENT, COLLECTED, COUNTER, INFO, LEVEL, SERIES, WINDOW, Series

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
README = REPO / "roles" / "exporter" / "README.md"
GOLDEN = REPO / "tests" / "fixtures" / "exporter" / "golden"
COLLECTOR = REPO / "src" / "specops" / "exporter" / "collector.py"
# what no golden state shows (each is built from the catalogue like the rest; the states have no tune record with a
# draft length or a prediction, and no GPU)
NOT_IN_GOLDEN = {"specops_tune_draft_n_max", "specops_tune_predicted_speedup", "llamacpp_gpu_monitoring",
                 "llamacpp_process_gpu_memory_bytes"}


def test_the_readme_table_is_current() -> None:
    assert exporter_series.update(README, write=False) is False, "run `specops exporter-series --update`"
    out = subprocess.run([sys.executable, "-m", "specops.cli", "exporter-series", "--update", "--check"], cwd=REPO,
                         capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, ""), out


def test_the_readme_names_every_series_and_no_other() -> None:
    text = README.read_text()
    missing = [s.name for s in CATALOGUE if f"| `{s.name}` |" not in text]
    assert not missing
    assert len(CATALOGUE) == len(SERIES) >= 70
    # (the facts it reads from other roles are named in their own section, and are no series)
    prose = re.sub(r"\n## What it reads and gives\n.*?(?=\n## |\Z)", "\n", text, flags=re.S)
    named = set(re.findall(r"\b((?:llamacpp|specops)_[a-z0-9_]*[a-z0-9])\b", prose)) - {"specops_package"}
    assert sorted(named - set(SERIES)) == [], "the README's prose names a series the exporter does not emit"


def test_a_stale_table_is_found_and_rewritten(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{exporter_series.BEGIN}\n| old |\n{exporter_series.END}\nafter\n")
    assert exporter_series.update(readme, write=False) is True and "| old |" in readme.read_text()
    assert exporter_series.update(readme) is True
    assert "| `llamacpp_up` | gauge |" in readme.read_text() and readme.read_text().endswith("after\n")
    assert exporter_series.update(readme) is False


# ---- the golden expositions hold nothing the catalogue lacks ---------------------------------------------------------


def _exposed(family_name: str, kind: str) -> str:
    return family_name + "_total" if kind == "counter" else family_name


def _help_pattern(s: Series) -> re.Pattern[str]:
    texts = [s.help, *([s.log_help] if s.log_help else [])]
    escaped = [re.escape(t).replace(re.escape(WINDOW), r"[0-9.e+]+").replace(re.escape(LEVEL), r"[0-9.]+%")
               for t in texts]
    return re.compile("|".join(f"(?:{e})" for e in escaped) + r"\Z")


def golden() -> dict[str, list]:
    """Exposed name -> its families over every golden state."""
    found: dict[str, list] = {}
    for path in sorted(GOLDEN.glob("*.prom")):
        for fam in text_string_to_metric_families(path.read_text()):
            found.setdefault(_exposed(fam.name, fam.type), []).append(fam)
    return found


def test_every_golden_series_is_declared_with_its_type_labels_and_help() -> None:
    found = golden()
    assert len(found) >= 60
    for name, families in found.items():
        assert name in SERIES, f"{name}: emitted in a golden state, not in the catalogue"
        s = SERIES[name]
        for fam in families:
            assert fam.type == ("gauge" if s.type == INFO else s.type), name
            assert _help_pattern(s).match(fam.documentation), (name, fam.documentation)
            labels = {k for sample in fam.samples for k in sample.labels} - {"le"}
            assert (labels == set(s.labels)) if s.type == INFO else (labels <= set(s.labels)), (name, labels)
    assert set(COLLECTED) - set(found) == NOT_IN_GOLDEN


# ---- the collector builds every family from the catalogue ------------------------------------------------------------

BUILDERS = {"_gauge", "_counter", "_family", "_info"}


def _names_built(tree: ast.AST) -> set[str]:
    """The series the collector's builders are called with: literal names, the band's two (an f-string over low and
    high), the per-position counter, and the server series an engine maps (a loop over them)."""
    engines = {n for e in ENGINE_BY_NAME.values() for n in (*e.counters.values(), *e.gauges.values())}
    out: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            out.add(arg.value)
        elif isinstance(arg, ast.JoinedStr) and ast.unparse(arg) == "f'specops_tune_live_band_{edge}'":
            out |= {"specops_tune_live_band_low", "specops_tune_live_band_high"}
        elif isinstance(arg, ast.Name) and arg.id == "PER_POS_NAME":
            out.add(PER_POS_NAME)
        elif isinstance(arg, ast.Name) and arg.id == "name":  # s.metrics' counters and gauges, s.spec_counters()
            out |= engines
        else:
            raise AssertionError(f"collector.py:{node.lineno}: {ast.unparse(node)}: which series? (extend this test)")
    return out


def test_the_collector_builds_exactly_the_catalogues_series() -> None:
    tree = ast.parse(COLLECTOR.read_text())
    assert _names_built(tree) == set(COLLECTED)
    family_calls = [(f.name, node.lineno) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                    for node in ast.walk(f) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id.endswith("MetricFamily")]
    assert {fn for fn, _line in family_calls} == {"_family"}, family_calls
    with pytest.raises(KeyError):
        collector._family("llamacpp_not_declared")


def test_the_families_take_the_catalogues_names_and_placeholders() -> None:
    c = collector._family("llamacpp_server_restarts_total")
    assert (c.name, c.type) == ("llamacpp_server_restarts", COUNTER)
    g = collector._gauge("llamacpp_spec_acceptance_ratio", 0.5, 300.0)
    assert g is not None and "window (300s)" in g.documentation and WINDOW not in g.documentation
    band = collector._gauge("specops_tune_live_band_low", 1.1, level="99%")
    assert band is not None and band.documentation.startswith("Low end of the 99% prediction band")
    assert collector._counter("llamacpp_spec_drafts_total", 3, from_log=True).documentation.endswith("in the log.")
    assert collector._info("specops_tune_info", {"chosen": "plain"}).name == "specops_tune"


# ---- prometheus-client's own ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ProcessCollector reads /proc")
def test_the_process_series_are_prometheus_clients() -> None:
    theirs = {(_exposed(m.name, m.type), m.type, m.documentation) for m in ProcessCollector(registry=None).collect()}
    ours = {(s.name, s.type, s.help) for s in CATALOGUE if s.group == CLIENT}
    assert ours == theirs
