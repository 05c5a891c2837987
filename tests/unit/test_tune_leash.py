"""The tune's leash (specops.tune.leash, issue 51): a tune started by a deploy stops itself, in one line and without
writing the host's record, when the deploy stopped watching it (heartbeat) or no longer holds its lock."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from specops import paths
from specops.commands import tune
from specops.tune import leash, progress

pytestmark = pytest.mark.fast

RUN = "ctl:4242:987"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def holder(path: Path, run_id: str = RUN, **extra: object) -> Path:
    path.write_text(json.dumps({"run_id": run_id, "pid": 4242, "controller": "ctl", **extra}))
    return path


def stopped(lsh: leash.Leash) -> str:
    with pytest.raises(leash.Stopped) as exc:
        lsh.check()
    return exc.value.line()


def test_nothing_to_watch_never_stops():
    leash.Leash().check()


def test_a_fresh_heartbeat_goes_on_and_a_stale_one_stops(tmp_path: Path):
    beat = tmp_path / "tune-heartbeat"
    beat.write_text("")
    clock = Clock(beat.stat().st_mtime + 10)
    lsh = leash.Leash(beat, 60, clock=clock)
    lsh.check()
    clock.now += 65  # 75 s since the last look
    assert stopped(lsh) == (f"stopped: no heartbeat from the deploy for 75 s ({beat}, --heartbeat-timeout 60): the "
                            "deploy stopped watching")
    os.utime(beat)  # a look afterwards does not bring a stopped tune back
    with pytest.raises(leash.Stopped):
        lsh.check()


def test_a_heartbeat_not_there_counts_from_the_start(tmp_path: Path):
    clock = Clock()
    lsh = leash.Leash(tmp_path / "none", 60, clock=clock)
    clock.now += 59
    lsh.check()
    clock.now += 2
    assert stopped(lsh).startswith("stopped: no heartbeat from the deploy for 61 s")


def test_the_lock_still_this_runs_goes_on(tmp_path: Path):
    leash.Leash(lock=holder(tmp_path / "deploy.lock"), run_id=RUN).check()


def test_a_lock_taken_over_stops(tmp_path: Path):
    lock = holder(tmp_path / "deploy.lock")
    lsh = leash.Leash(lock=lock, run_id=RUN)
    holder(lock, "ctl:5151:1000", pid=5151)
    assert stopped(lsh) == (f"stopped: the deploy's lock is no longer this run's ({lock} names run ctl:5151:1000 "
                            f"(pid 5151, controller ctl), not {RUN}: another deploy took it over)")


def test_a_lock_released_stops(tmp_path: Path):
    lock = holder(tmp_path / "deploy.lock")
    lsh = leash.Leash(lock=lock, run_id=RUN)
    lock.unlink()
    assert stopped(lsh) == f"stopped: the deploy's lock is no longer this run's ({lock} is gone: released)"


@pytest.mark.parametrize("text", ["", "{not json", json.dumps({"pid": 1}), json.dumps(["x"])])
def test_an_unreadable_lock_stops(tmp_path: Path, text: str):
    lock = tmp_path / "deploy.lock"
    lock.write_text(text)
    assert stopped(leash.Leash(lock=lock, run_id=RUN)) == (
        f"stopped: the deploy's lock is no longer this run's ({lock} is unreadable: no holder in it)")


def test_without_a_run_id_the_run_holding_the_lock_at_the_start_is_this_one(tmp_path: Path):
    lock = holder(tmp_path / "deploy.lock")
    lsh = leash.Leash(lock=lock)
    assert lsh.run_id == RUN
    lsh.check()
    holder(lock, "other:1:1")
    with pytest.raises(leash.Stopped):
        lsh.check()


def test_the_arguments():
    p = argparse.ArgumentParser()
    leash.add_arguments(p)
    args = p.parse_args(["--heartbeat", "/run/specops/tune-heartbeat", "--lock", "/run/specops/deploy.lock",
                         "--lock-run-id", RUN])
    lsh = leash.Leash.of(args)
    assert (lsh.heartbeat, lsh.heartbeat_timeout, lsh.lock, lsh.run_id) == (
        Path("/run/specops/tune-heartbeat"), 60.0, Path("/run/specops/deploy.lock"), RUN)
    assert not leash.Leash.of(p.parse_args([])).watched


def test_every_progress_step_looks_at_the_leash(tmp_path: Path):
    lock = holder(tmp_path / "deploy.lock")
    meter = progress.ProgressFile(tmp_path / "tune-progress.txt", leash.Leash(lock=lock, run_id=RUN))
    meter.update("probes", "plain (1/3)", 100)
    lock.unlink()
    with pytest.raises(leash.Stopped):
        meter.update("probes", "exact-ngram-mod (2/3)", 90)
    assert (tmp_path / "tune-progress.txt").read_text().startswith("tune: probes — plain (1/3)")


def test_the_watchdog_interrupts_a_tune_in_the_middle_of_a_step(tmp_path: Path):
    """A probe or a measured block can take a minute: the watchdog thread interrupts the main thread (SIGUSR1) so a
    tune blocked in a call stops within a few seconds of its deploy going."""
    lock = holder(tmp_path / "deploy.lock")
    before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)
    lsh = leash.Leash(lock=lock, run_id=RUN, watch_s=0.05)
    t0 = time.monotonic()
    with pytest.raises(leash.Stopped) as exc, lsh:
        lock.unlink()
        time.sleep(10)  # a step that would take long
    assert time.monotonic() - t0 < 5
    assert "is gone: released" in exc.value.reason
    assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGTERM)) == before  # handlers given back


def test_sigterm_stops_the_tune_with_its_reason():
    with pytest.raises(leash.Stopped) as exc, leash.Leash():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert exc.value.reason.startswith("terminated (SIGTERM): under the deploy, its unit was stopped")


def test_a_measurement_interrupted_by_a_signal_stops_the_tune():
    leash.Leash().measured(0)
    leash.Leash().measured(1)  # the bench's own failure: the tune says it and goes on, as before
    with pytest.raises(leash.Stopped) as exc:
        leash.Leash().measured(130)
    assert exc.value.reason.startswith("interrupted during the side-by-side measurement")


def test_write_whole_leaves_no_temporary_file(tmp_path: Path):
    out = tmp_path / "tune.json"
    paths.write_whole(out, "{}")
    assert out.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["tune.json"]


# -- specops tune on its leash: the last look before --out is written

def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    return p.parse_args(["--target", str(tmp_path / "t.gguf"), "--out", str(tmp_path / "tune.json"),
                         "--progress-file", str(tmp_path / "tune-progress.txt"), *extra])


def _fake_tune(monkeypatch, tmp_path: Path, during=lambda: None) -> None:
    """specops tune with its setup and its measurement replaced: ``during`` runs where the tune would measure."""
    work = tmp_path / "work"

    def watched(s, args, retuned=None):
        during()
        return {"chosen": "exact-ngram-mod", "elapsed_s": 12.0}, ""

    monkeypatch.setattr("specops.tune.prepare.prepare",
                        lambda args, meter=None: SimpleNamespace(store=SimpleNamespace(root=work), work=work,
                                                                 meter=meter))
    monkeypatch.setattr("specops.tune.pipeline.watched", watched)
    monkeypatch.setattr(tune, "_print", lambda result, s, args: print("the table"))


def test_a_tune_whose_run_holds_the_lock_writes_its_record(tmp_path: Path, monkeypatch, capsys):
    lock = holder(tmp_path / "deploy.lock")
    _fake_tune(monkeypatch, tmp_path)
    assert tune.run(_args(tmp_path, "--lock", str(lock), "--lock-run-id", RUN)) == 0
    assert json.loads((tmp_path / "tune.json").read_text())["chosen"] == "exact-ngram-mod"
    assert (tmp_path / "work" / "tune.json").exists() and "the table" in capsys.readouterr().out


def test_a_tune_whose_lock_was_taken_over_writes_nothing_and_says_so(tmp_path: Path, monkeypatch, capsys):
    lock = holder(tmp_path / "deploy.lock")
    record = tmp_path / "tune.json"
    record.write_text('{"chosen": "plain"}')
    _fake_tune(monkeypatch, tmp_path, during=lambda: holder(lock, "ctl:5151:1000"))
    assert tune.run(_args(tmp_path, "--lock", str(lock), "--lock-run-id", RUN)) == leash.STOPPED
    out = capsys.readouterr().out
    assert out.splitlines() == [f"stopped: the deploy's lock is no longer this run's ({lock} names run ctl:5151:1000 "
                                f"(pid 4242, controller ctl), not {RUN}: another deploy took it over); {record} was "
                                "not written"]
    assert record.read_text() == '{"chosen": "plain"}' and not (tmp_path / "work" / "tune.json").exists()
    assert (tmp_path / "tune-progress.txt").read_text().startswith("tune: stopped — the deploy's lock is no longer")


def test_a_tune_without_a_heartbeat_stops_before_it_starts_anything(tmp_path: Path, monkeypatch, capsys):
    beat = tmp_path / "tune-heartbeat"
    beat.write_text("")
    old = time.time() - 300
    os.utime(beat, (old, old))
    _fake_tune(monkeypatch, tmp_path, during=lambda: pytest.fail("the tune went on"))
    assert tune.run(_args(tmp_path, "--heartbeat", str(beat))) == leash.STOPPED
    assert capsys.readouterr().out.startswith("stopped: no heartbeat from the deploy for 300 s")
    assert not (tmp_path / "tune.json").exists()
