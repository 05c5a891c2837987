"""The deploy's speed-gate record (``/etc/specops/speed-gate.json``), read for the exporter.

The deploy measures the speculative service against plain decoding of the same build on this host and keeps
the figures there (:mod:`specops.speedgate`). Exported per instance, Prometheus can compare the service's
decode speed with this host's own plain-decoding figure and alert when speculation starts losing, and judge
acceptance against this host's own break-even.

A record is only worth its figures while it describes the unit that runs: the deploy writes the installed
systemd unit's path and sha256 into it (``unit_file``, ``installed_unit_sha256``), and the exporter compares
them with the unit file on disk. What the exporter says about the record, whenever a record path is
configured, is one of (``specops_speed_gate_record_state{state}``, exactly one is 1):

- ``ok``: a valid record for the unit on disk;
- ``missing``: no file at the path;
- ``invalid``: unreadable, not JSON, or not a record (the log says why);
- ``stale``: a valid record that names no unit, or a unit file that cannot be read or has changed since.

The figures (and ``specops_speed_gate_info``) are exported only for an ``ok`` record whose verdict is
``pays`` or ``loses``: ``unproven`` and ``not_measured`` records have no figures to stand on, and a stale
record's verdict is another unit's. No number beats a wrong one.

The deploy's auto-tune, when it ran or reused its result, leaves its choice in the record too (``tune``: the chosen
profile, its draft length, its measured speedup over plain decoding with the interval, when, reused, and the model and
prediction band of the live check). Those figures
stand on their own, whatever the gate's verdict (a ``not_measured`` record of a deploy with the gate off still has
one), so they are exported (``specops_tune_*``) for any ``ok`` record that has them. A malformed ``tune`` does not
make the record invalid: its series are left out and the log says why, once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import stat
import threading
from dataclasses import dataclass
from typing import Any

from specops.tune.band import Band
from specops.tune.band import parse as parse_band
from specops.tune.live import LiveModel
from specops.tune.live import parse as parse_live

log = logging.getLogger(__name__)

_NUMBERS = ("plain_tps", "speculative_tps", "ratio", "break_even_acceptance", "min_ratio")
_LABELS = ("verdict", "action", "serving", "spec_type", "mode", "measured_at", "build_id")
VERDICTS = ("pays", "loses", "unproven", "not_measured")  # also the deploy's (specops.speedgate.read_record)
MEASURED = ("pays", "loses")  # the verdicts whose figures are exported
# Where the deploy installs systemd units; a record naming a unit file anywhere else is not one of ours (and the
# exporter hashes no other file).
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system")
OK, MISSING, INVALID, STALE = "ok", "missing", "invalid", "stale"
STATES = (OK, MISSING, INVALID, STALE)
MAX_RECORD_BYTES = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
FIX = "re-run the deploy; it rewrites the record"


@dataclass(frozen=True)
class SpeedGate:
    numbers: dict[str, float]
    labels: dict[str, str]
    mtime: float


@dataclass(frozen=True)
class Tune:
    """The deploy's auto-tune as the record keeps it (``tune``): the info's labels (chosen, spec_type, when,
    reused, tasks: what it measured on, mix: the traffic's shares it chose for), the figures present
    (draft_n_max, predicted, speedup_estimate, speedup_low, speedup_high, speedup_n), each a finite number >= 0, and
    the cost model that prices the chosen profile on the live traffic (``live_model``; None: none kept, plain
    decoding chosen, or a malformed one) and the live figure's prediction band for a window of n requests
    (``live_model.band``; None: none kept, or a malformed one)."""

    labels: dict[str, str]
    numbers: dict[str, float]
    live: LiveModel | None = None
    band: Band | None = None


@dataclass(frozen=True)
class Record:
    """A valid record: its verdict, its figures (``None`` unless measured), the unit it was written for, and the
    tune it keeps (``None`` when it keeps none, or a malformed one: then ``tune_problem`` says why)."""

    verdict: str
    gate: SpeedGate | None
    unit_file: str | None
    installed_unit_sha256: str | None
    why_unproven: str = ""
    tune: Tune | None = None
    tune_problem: str = ""


@dataclass(frozen=True)
class Reading:
    """What the exporter says about the record now: its state, why (one line), and the figures to export."""

    state: str
    why: str
    gate: SpeedGate | None = None  # only for an ok record whose verdict is pays or loses
    tune: Tune | None = None  # only for an ok record that keeps a well-formed tune, whatever its verdict


def _number_problem(key: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"{key} is {v!r}, not a number"
    if not math.isfinite(v) or v < 0:
        return f"{key} is {v!r}, not a finite number >= 0"
    return ""


def parse_tune(value: Any) -> tuple[Tune | None, str]:
    """The tune a record keeps: ``(None, "")`` when it keeps none, ``(None, why)`` when ``value`` is not one."""
    if value is None:
        return None, ""
    if not isinstance(value, dict):
        return None, f"tune is a JSON {type(value).__name__}, not an object"
    chosen = value.get("chosen")
    if not isinstance(chosen, str) or not chosen.strip():
        return None, f"tune.chosen is {str(chosen)[:80]!r}, not a profile's name"
    labels = {"chosen": chosen}
    for key in ("spec_type", "when", "tasks", "mix"):
        v = value.get(key)
        if v is not None and not isinstance(v, str):
            return None, f"tune.{key} is {str(v)[:80]!r}, not a string"
        labels[key] = v or "unknown"
    reused = value.get("reused")
    if reused is not None and not isinstance(reused, bool):
        return None, f"tune.reused is {str(reused)[:80]!r}, not true or false"
    labels["reused"] = "unknown" if reused is None else str(reused).lower()
    speedup = value.get("speedup")
    if speedup is not None and not isinstance(speedup, dict):
        return None, f"tune.speedup is a JSON {type(speedup).__name__}, not an object"
    figures = {"draft_n_max": value.get("draft_n_max"), "predicted": value.get("predicted"),
               **{f"speedup_{k}": (speedup or {}).get(k) for k in ("estimate", "low", "high", "n")}}
    numbers: dict[str, float] = {}
    for key, v in figures.items():
        if v is None:
            continue
        problem = _number_problem(f"tune.{key.replace('speedup_', 'speedup.')}", v)
        if problem:
            return None, problem
        numbers[key] = float(v)
    if value.get("live_model") is None:
        return Tune(labels, numbers), ""
    try:  # a malformed model loses the live prediction only: the tune's own figures stand
        model = parse_live(value["live_model"])
    except ValueError as exc:
        return Tune(labels, numbers), f"tune.{exc}: no specops_tune_live_predicted_speedup"
    kept = value["live_model"].get("band")
    if kept is None:  # a record from before the band, or a tune without numpy: the live figure alone
        return Tune(labels, numbers, model), ""
    try:  # a malformed band loses the band only
        return Tune(labels, numbers, model, parse_band(kept)), ""
    except ValueError as exc:
        return Tune(labels, numbers, model), f"tune.live_model.{exc}: no specops_tune_live_band_* series"


def unit_path_problem(path: Any, unit_dirs: tuple[str, ...] = UNIT_DIRS) -> str:
    """Why ``path`` cannot be a unit file the deploy installed ('' when it can): a string, absolute, with no
    ``..``, strictly below one of ``unit_dirs``."""
    if not isinstance(path, str) or not path:
        return f"unit_file is {path!r}, not a path"
    if not os.path.isabs(path) or os.path.normpath(path) != path:
        return f"unit_file {path!r} is not an absolute, normalised path"
    if not any(path.startswith(d.rstrip("/") + "/") for d in unit_dirs):
        return f"unit_file {path!r} is not under {' or '.join(unit_dirs)}"
    return ""


def validate(data: Any, mtime: float = 0.0, unit_dirs: tuple[str, ...] = UNIT_DIRS) -> tuple[Record | None, str]:
    """The record in ``data``, or None and why it is not one (one line)."""
    if not isinstance(data, dict):
        return None, f"it holds a JSON {type(data).__name__}, not a record"
    verdict = data.get("verdict")
    if verdict not in VERDICTS:
        return None, f"verdict is {verdict!r}, none of {', '.join(VERDICTS)}"
    numbers: dict[str, float] = {}
    for key in _NUMBERS:
        v = data.get(key)
        if v is None:
            continue
        problem = _number_problem(key, v)
        if problem:
            return None, problem
        numbers[key] = float(v)
    gate = None
    if verdict in MEASURED:
        if not numbers.get("plain_tps") or not numbers.get("speculative_tps"):
            return None, f"verdict {verdict!r} without plain_tps and speculative_tps above 0"
        gate = SpeedGate(numbers, {k: str(data.get(k, "")) for k in _LABELS}, mtime)
    unit_file, sha = data.get("unit_file"), data.get("installed_unit_sha256")
    if unit_file is not None:
        problem = unit_path_problem(unit_file, unit_dirs)
        if problem:
            return None, problem
    if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        return None, f"installed_unit_sha256 is {str(sha)[:80]!r}, not a sha256 in lower-case hex"
    tune, tune_problem = parse_tune(data.get("tune"))  # a malformed tune loses its own series, not the record
    return Record(verdict, gate, unit_file, sha, str(data.get("unproven_because", "") or ""), tune, tune_problem), ""


def parse(data: Any, mtime: float = 0.0) -> SpeedGate | None:
    """The figures of a measured record (verdict pays or loses); None otherwise. Whether they describe the unit
    that runs now is :class:`SpeedGateFile`'s to say."""
    record, _ = validate(data, mtime)
    return record.gate if record is not None else None


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """Changes whenever the file's content may have (replaced, written, truncated, touched)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SpeedGateFile:
    """The record at ``path`` and the unit file it names, checked on every :meth:`check` with two ``stat`` calls:
    the record is re-read when it changes, the unit file re-hashed when it changes. Each change of state (or of
    why) is logged once."""

    def __init__(self, path: str | None, unit_dirs: tuple[str, ...] = UNIT_DIRS) -> None:
        self.path = path
        self.unit_dirs = tuple(unit_dirs)
        self._lock = threading.Lock()  # collect() may run in several scrape threads at once
        self._record_id: tuple[int, ...] | None = None
        self._record: tuple[Record | None, str] = (None, "")
        self._unit_id: tuple[str, tuple[int, ...]] | None = None
        self._unit_sha = ""
        self._logged: tuple[str, str] | None = None
        self._tune_logged = ""

    def read(self) -> SpeedGate | None:
        """The figures to export: those of an ok record with a measured verdict, else None."""
        return self.check().gate if self.path else None

    def check(self) -> Reading:
        if not self.path:
            return Reading(MISSING, "no record path configured")
        with self._lock:
            reading = self._check(self.path)
            self._log(reading)
            self._log_tune(self.path, reading)
            return reading

    # ---- the record ----------------------------------------------------------------------------------------
    def _check(self, path: str) -> Reading:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._record_id = None
            return Reading(MISSING, f"speed gate record {path} is missing: no speed-gate series ({FIX})")
        except OSError as exc:
            self._record_id = None
            return Reading(INVALID, f"speed gate record {path} cannot be read ({exc.strerror or exc}): "
                                    f"no speed-gate series ({FIX})")
        if _identity(st) != self._record_id:
            self._record_id = _identity(st)
            self._record = self._load(path, st)
        record, why = self._record
        if record is None:
            return Reading(INVALID, f"speed gate record {path} is invalid: {why}: no speed-gate series ({FIX})")
        return self._against_unit(path, record)

    def _load(self, path: str, st: os.stat_result) -> tuple[Record | None, str]:
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size > MAX_RECORD_BYTES:
            return None, f"{st.st_size} bytes, more than a record's {MAX_RECORD_BYTES}"
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_RECORD_BYTES + 1)
        except OSError as exc:
            return None, f"cannot be read ({exc.strerror or exc})"
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return None, "not UTF-8 text"
        except json.JSONDecodeError as exc:
            return None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        except (ValueError, RecursionError):
            return None, "not valid JSON"
        return validate(data, st.st_mtime, self.unit_dirs)

    # ---- the unit it was written for -------------------------------------------------------------------------
    def _against_unit(self, path: str, record: Record) -> Reading:
        what = f"speed gate record {path} (verdict {record.verdict})"
        if not record.unit_file or not record.installed_unit_sha256:
            return Reading(STALE, f"{what} is stale: it names no unit (unit_file and installed_unit_sha256), so "
                                  f"nothing says it is the running unit's: no speed-gate series ({FIX})")
        unit = record.unit_file
        try:
            st = os.stat(unit)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{unit} is not a regular file")
            key = (unit, _identity(st))
            if key != self._unit_id:
                self._unit_id, self._unit_sha = None, ""
                self._unit_sha = sha256_of(unit)
                self._unit_id = key
        except OSError as exc:
            self._unit_id, self._unit_sha = None, ""
            return Reading(STALE, f"{what} is stale: its unit file {unit} cannot be read "
                                  f"({exc.strerror or exc}): no speed-gate series ({FIX})")
        recorded = record.installed_unit_sha256
        if self._unit_sha != recorded:
            return Reading(STALE, f"{what} is stale: {unit} has changed since the deploy wrote the record "
                                  f"(sha256 {self._unit_sha[:12]}… now, {recorded[:12]}… recorded): "
                                  f"no speed-gate series ({FIX})")
        if record.gate is not None:
            return Reading(OK, f"{what} is ok for {unit}", record.gate, record.tune)
        because = f" ({record.why_unproven})" if record.why_unproven else ""
        return Reading(OK, f"{what} is ok for {unit}{because}: no figures to export for this verdict",
                       tune=record.tune)

    def _log(self, reading: Reading) -> None:
        key = (reading.state, reading.why)
        if key == self._logged:
            return
        self._logged = key
        (log.info if reading.state == OK else log.warning)("%s", reading.why)

    def _log_tune(self, path: str, reading: Reading) -> None:
        """A malformed tune in an ok record, logged once per reason (a record not ok exports no tune anyway)."""
        record = self._record[0]
        problem = record.tune_problem if reading.state == OK and record is not None else ""
        if problem == self._tune_logged:
            return
        self._tune_logged = problem
        if problem:
            lost = "" if record is not None and record.tune is not None else ": no specops_tune_* series"
            log.warning("speed gate record %s keeps a malformed tune: %s%s (the speed-gate "
                        "series are not affected; %s)", path, problem, lost, FIX)
