"""The tune's progress line (specops.tune.progress): one line, rewritten whole, that the deploy's watcher prints while
the tune runs as one Ansible task; after every block of the measurement, the candidates' figures so far."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path

import pytest

from specops.bench.arms import AA, BASELINE
from specops.bench.design import Block, Design
from specops.tune import progress

pytestmark = pytest.mark.fast


def test_the_line_names_the_phase_the_detail_and_the_time_left():
    assert progress.line("probes", "exact-n4 (2/5)", 192.4) == "tune: probes — exact-n4 (2/5) — 3:12 left"
    assert progress.clock(59.6) == "1:00" and progress.clock(-5) == "0:00"  # an overrun budget reads 0:00


def test_the_file_is_rewritten_whole(tmp_path: Path):
    path = tmp_path / "state" / "tune-progress.txt"
    meter = progress.ProgressFile(path)
    meter.update("ceiling", "llama-bench prices a draft step", 360)
    assert path.read_text() == "tune: ceiling — llama-bench prices a draft step — 6:00 left\n"
    meter.update("choose", "exact-n4 1.21× [1.10, 1.30]", 3)
    meter.done("chose exact-n4")
    assert path.read_text() == "tune: done — chose exact-n4\n"
    assert [p.name for p in path.parent.iterdir()] == ["tune-progress.txt"]  # no temporary file left
    meter.stopped("llama-bench failed: exit 1\nmore")
    assert path.read_text() == "tune: stopped — llama-bench failed: exit 1\n"


def test_no_path_writes_nothing_and_an_unwritable_one_is_said_once(tmp_path: Path, capsys):
    progress.ProgressFile(None).update("ceiling", "x", 1)  # nothing to do
    blocker = tmp_path / "file"
    blocker.write_text("")
    meter = progress.ProgressFile(blocker / "tune-progress.txt")  # a file where the directory should be
    meter.update("ceiling", "x", 1)
    meter.update("probes", "y", 1)
    err = capsys.readouterr().err
    assert err.count("specops tune: progress file") == 1 and "not written again" in err


def test_the_argument():
    p = argparse.ArgumentParser()
    progress.add_argument(p)
    assert p.parse_args(["--progress-file", "/etc/specops/tune-progress.txt"]).progress_file == \
        Path("/etc/specops/tune-progress.txt")
    assert p.parse_args([]).progress_file is None


def test_the_measurement_writes_every_candidates_figures_after_each_block(tmp_path: Path):
    path = tmp_path / "tune-progress.txt"
    design = Design(["exact-n4", "exact-ngram-mod"], {"code": ["t1", "t2", "t3"]}, min_tasks=None)
    out = io.StringIO()
    meter = progress.MeasureProgress(progress.ProgressFile(path), lambda: 125.0, stream=out)
    arms = (BASELINE, AA, "exact-n4", "exact-ngram-mod")
    for i, (n4, mod) in enumerate([(12.0, 10.0), (13.0, None), (12.5, 9.5)]):
        block = Block(i, 0, "code", f"t{i + 1}", arms)
        tps = {BASELINE: 10.0, AA: 10.0, "exact-n4": n4, "exact-ngram-mod": mod}
        design.add(block, tps)
        meter.block(design, block, tps, 10.0 * (i + 1), 300.0, 3)
        text = path.read_text()
        assert text.startswith(f"tune: measure — block {i + 1}: exact-n4 1.2") and text.endswith("— 2:05 left\n")
    assert "exact-ngram-mod 0.97× [" in path.read_text()
    assert "[block 3," in out.getvalue()  # the bench's own lines, as ever


def test_figures_before_any_block():
    design = Design(["exact-n4"], {"code": ["t1"]})
    assert progress.figures(design) == "exact-n4 –"


def test_the_role_passes_only_flags_specops_tune_has():
    """roles/llama_server_tune/tasks/*.yml's command line (main.yml's, --progress-file among its flags; --shared in
    run.yml, --kind-only in share.yml) against the parser of `specops tune`: a flag it does not have would refuse
    every deploy's tune."""
    from specops.commands import tune

    tasks = Path(__file__).resolve().parents[2] / "roles" / "llama_server_tune" / "tasks"
    text = "\n".join(f.read_text() for f in sorted(tasks.glob("*.yml")))
    flags = set(re.findall(r"'(--[a-z][a-z0-9-]+)'", text))
    assert {"--progress-file", "--reuse", "--shared", "--kind-only", "--target-sha256"} <= flags
    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    assert sorted(flags - set(p._option_string_actions)) == []
