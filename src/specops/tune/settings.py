"""The tune's settings, declared once: the tune settings table.

One entry per setting the deploy keeps for the tune or hands ``specops tune``: its role variable
(``llama_server_<name>``), ``specops tune``'s option where it has one and how the deploy passes it, its type,
default, range or choices, and one line of documentation. Everything else derives from this table:

- the tune blocks of roles/llama_server's ``defaults/main.yml`` and ``meta/argument_specs.yml``, written by
  ``specops knobs --update`` (:mod:`specops.knobgen`; tests/unit/test_knobgen.py fails when they are stale);
- the preflight's ranges of those settings (:data:`specops.deploycheck.RANGES`);
- ``specops tune``'s defaults (:mod:`specops.commands.tune`: :func:`cli_defaults`);
- the tune's command line in roles/llama_server_tune/tasks/main.yml: :func:`argv` (the filter
  ``specops_tune_setting_args``) writes every setting's words, and the task adds only what is no setting (the
  paths, the models' sha256, ``--reuse``, the live service's address, the heartbeat and the lock).

Three settings the tune takes are llama-server's (the context, the threads, the slots): their role variables,
types and defaults are the knob table's (:mod:`specops.knobs`), read from there. One is the speed gate's
(``llama_server_speed_gate_idle_timeout``), declared by hand in the role: tests/unit/test_tune_settings.py holds
its default equal to this table's. This module imports nothing but the knob table and the output rules
(:mod:`specops.outputrule`): the filter plugins, the preflight and the tune on the host all read it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specops.knobs import knob
from specops.outputrule import DEFAULT_RULE, RULES

# Whose the role variable is (Setting.owner)
TUNE = "tune"  # declared here: the role's default and argument specs are written from this table
KNOBS = "knobs"  # a llama-server setting: the knob table declares its variable, type and default
ROLE = "role"  # another role setting, declared by hand there (its default held equal to this one by a test)

# How the deploy hands it to `specops tune` (Setting.passed); :func:`argv` writes the first five
VALUE = "value"  # FLAG VALUE on every command line
IF_SET = "if_set"  # FLAG VALUE where the value is set (not null, 0 or empty)
POSITIVE = "positive"  # FLAG VALUE where the value is above 0, else FLAG and the option's own default
FILES = "files"  # FLAG=DIR/NAME for each file, by its name in the host's copy of them (prepare.yml ships them)
MIX = "mix"  # FLAG WORKLOAD=SHARE,... where any share is given
UNLESS_DEFAULT = "unless_default"  # FLAG alone where the value is other than the default
SCOPE = "scope"  # by the filter specops_tune_scope, within what the inventory left open (specops.tune.deploy)
SERVICE = "service"  # by roles/llama_server_tune beside --service-url, only while the service is running
NOT_PASSED = "not_passed"  # the role alone reads it
ARGV = (VALUE, IF_SET, POSITIVE, FILES, MIX, UNLESS_DEFAULT)
# the option takes the setting's value as it is, and its default is the setting's (the others: no files and no mix
# are the option left out, --own-only is a switch)
SAME_DEFAULT = (VALUE, IF_SET, POSITIVE, SCOPE, SERVICE)
PASSED = (*ARGV, SCOPE, SERVICE, NOT_PASSED)


@dataclass(frozen=True)
class Setting:
    """One setting of the tune. ``name``: the role variable without its ``llama_server_`` prefix."""

    name: str
    type: str  # argument_specs type: int, float, str, bool, list, dict, path
    doc: str
    flag: str | None = None  # specops tune's option
    passed: str = NOT_PASSED  # how the deploy hands it over: one of PASSED (above)
    default: Any = None
    low: float | None = None  # the smallest value the preflight takes (None: no bound)
    high: float | None = None
    choices: tuple[str, ...] = ()
    elements: str | None = None  # a list's elements (argument_specs)
    computed: bool = False  # the role's default is computed (Jinja): written by hand beside the generated block
    owner: str = TUNE

    def __post_init__(self) -> None:
        if self.passed not in PASSED:
            raise ValueError(f"tune setting {self.name}: passed {self.passed!r} is none of {', '.join(PASSED)}")
        if (self.flag is None) != (self.passed == NOT_PASSED):
            raise ValueError(f"tune setting {self.name}: a setting the deploy passes has its option, and only one")

    @property
    def var(self) -> str:
        """The role variable."""
        return f"llama_server_{self.name}"

    @property
    def dest(self) -> str | None:
        """``specops tune``'s attribute for the option (``--limit-per-workload`` -> ``limit_per_workload``)."""
        return self.flag.lstrip("-").replace("-", "_") if self.flag else None

    @property
    def cli_default(self) -> Any:
        """The option's default as ``specops tune`` takes it: a list as its comma-separated text, a float as a float."""
        if isinstance(self.default, tuple):
            return ",".join(map(str, self.default))
        if self.type == "float" and self.default is not None:
            return float(self.default)
        return self.default


def _knob(name: str, flag: str, passed: str, doc: str) -> Setting:
    """A llama-server setting the tune takes: its variable's type, default and bounds are the knob's."""
    k = knob(name)
    assert k.role_var == f"llama_server_{name}", name
    return Setting(name, k.type, doc, flag, passed, k.default, k.low, k.high, owner=KNOBS)


SETTINGS: tuple[Setting, ...] = (
    # ---- the tune's own (roles/llama_server's tune block) ---------------------------------------------------
    Setting("tune", "str", "auto: run `specops tune` on the host before the units are rendered and deploy the "
            "profile that pays here, choosing only what the inventory left open: llama_server_spec_type auto (every "
            "kind the models and the build allow: the draft model, an EAGLE-3 draft, the target's MTP head, an "
            "n-gram type, llama.cpp's default; specops.kinds) and llama_server_draft_n_max null (the length among "
            "llama_server_tune_lengths; with draft-simple, draft-eagle3 or draft-mtp set, that kind's length only). "
            "It prices every candidate (llama-bench, short probes), measures the best few side by side against "
            "plain decoding with the same output (llama_server_tune_rule), and renders the winner into the "
            "unit; plain decoding as its answer is served directly (spec type none, one restart, nothing for the "
            "speed gate to judge) unless the inventory set the kind, which then stays for the speed gate to judge. "
            "Its result (llama_server_state_dir/tune.json, summarised in speed-gate.json) is reused until the "
            "build, a model, the device or a tune setting changes (llama_server_tune_refresh: tune again anyway). "
            "Explicit settings in the inventory win. off: deploy the configured profile as it is",
            default="auto", choices=("auto", "off")),
    Setting("tune_budget", "float", "Minutes the whole tune may take at most (it ends sooner once its tasks are "
            "measured: a GPU build usually does); what stays open when it runs out is said, with the tasks that "
            "would settle it. On a 2-core CPU the standard set used 888 s of 900 (ceiling, probes, 24 blocks of "
            "plain decoding beside llama.cpp's default n-gram type; the workloads where nothing could pay stopped "
            "after 3-5 tasks, every figure settled)", "--budget", VALUE, default=15, low=0.5),
    Setting("tune_lengths", "list", "Draft lengths (a draft model's, an EAGLE-3 draft's, MTP's n-max) the tune "
            "considers when llama_server_draft_n_max is null",
            "--lengths", SCOPE, default=(2, 4, 8, 12, 16), elements="int"),
    Setting("tune_max_tokens", "int", "max_tokens of each request the tune measures side by side", "--max-tokens",
            VALUE, default=96, low=8),
    Setting("tune_probe_tokens", "int", "max_tokens of each probe prompt", "--probe-tokens", VALUE, default=48, low=8),
    Setting("tune_limit_per_workload", "int", "Tasks per workload in the tune's side-by-side measurement, at most "
            "(the standard set holds 6 code tasks and 12-15 of the others); the budget may end it sooner, and a "
            "candidate that cannot pay on a workload stops there after 3", "--limit-per-workload", VALUE,
            default=12, low=1),
    Setting("tune_rule", "str", "What the tune requires of a candidate's output against plain decoding's. "
            "equivalent: the same answers except near-ties, each one quoted (plain decoding's top two choices closer "
            "than a verifying batch moves them on this host, measured there); identical: byte for byte on every "
            "answer checked; fastest: output not judged (benchmarking only). A change (plain decoding's choice was "
            "clear) is never served", "--rule", IF_SET, default=DEFAULT_RULE, choices=RULES),
    Setting("tune_refresh", "bool", "Tune again although the host's last result (llama_server_state_dir/tune.json) "
            "still applies", default=False),
    Setting("tune_tasks", "list", "Task files on the controller the tune measures on (the bench's JSONL format: chat "
            "messages and a workload per line; `specops tasks --from-requests LOG --per-workload N` writes one from a "
            "request log), shipped to the host readable by root only. Empty: the bench's standard set (code, edit, "
            "prose, tool calls)", "--tasks", FILES, default=(), elements="path"),
    Setting("tune_mix", "dict", "Each workload's share of the requests (e.g. {edit: 70, prose: 30}; shares are "
            "normalised, a workload left out or at 0 is not measured at all); the tune chooses on the mix's speedup "
            "weighted by time (the shares of requests weighed by each workload's measured plain decode seconds a "
            "request), its blocks going where share x spread settles that figure soonest, and ends once its choice "
            "is settled. Empty: each workload weighs by its share of the task files (the same for the standard set)",
            "--mix", MIX, default={}),
    Setting("tune_install_dir", "path", "Where specops and what the tune imports are installed on the host "
            "(roles/specops_package)", default="/opt/specops/tune"),
    Setting("tune_python", "path", "The host's Python that runs the tune", default="/usr/bin/python3"),
    Setting("tune_share", "str", "kind: a fleet tunes once per kind of host: a host's fresh tune result is kept on "
            "the controller (llama_server_tune_share_dir) under its kind key, and a host of the same kind whose own "
            "result does not stand reuses it instead of tuning (the kind: the build, the models' content by size and "
            "sha256, the device, llama_server_parallel and the tune's settings, tasks and mix, checked on the host "
            "by `specops tune --shared`); its record says it was shared, from which host and why. Each host still "
            "runs its own speed gate, and where it finds a shared speculative choice loses or cannot prove it, that "
            "host tunes for itself in the same deploy and says why. llama_server_tune_refresh tunes here and makes "
            "the result the kind's record (hosts holding an earlier one take it at their next deploy). off: every "
            "host tunes for itself (a record it took from another is not reused; specops tune --own-only)",
            "--own-only", UNLESS_DEFAULT, default="kind", choices=("kind", "off")),
    Setting("tune_share_dir", "str", "Controller directory where the records hosts share are kept "
            "(llama_server_tune_share kind), one <kind key>.json per kind, each naming the host it was tuned on "
            "(default $SPECOPS_CACHE/tune-shared, $SPECOPS_CACHE defaulting to ~/.cache/specops). Remove a file to "
            "have the next host of that kind tune again", computed=True),
    # ---- what the tune takes from other settings of the role --------------------------------------------------
    _knob("ctx_size", "--ctx-size", POSITIVE, "the tune's servers' context: llama_server_ctx_size, or where that is "
          "0 (the model's own) the option's default"),
    _knob("threads", "--threads", IF_SET, "the tune's servers' threads: llama_server_threads where set"),
    _knob("parallel", "--parallel", IF_SET, "the service's slots: the tune chooses for that many streams"),
    Setting("speed_gate_idle_timeout", "int", "how long the tune waits for the running service to be idle (seconds)",
            "--idle-timeout", SERVICE, default=120, owner=ROLE),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The setting whose role variable is ``llama_server_<name>``; a KeyError listing the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no tune setting {name!r}; known: {', '.join(_BY_NAME)}") from None


def own() -> tuple[Setting, ...]:
    """The settings declared here: the role's tune block."""
    return tuple(s for s in SETTINGS if s.owner == TUNE)


def cli_defaults() -> dict[str, Any]:
    """``specops tune``'s defaults of the options that take a setting's value: attribute -> default."""
    return {str(s.dest): s.cli_default for s in SETTINGS if s.passed in SAME_DEFAULT}


def ranges() -> dict[str, tuple[float | None, float | None]]:
    """(low, high) of each setting declared here with a bound, by role variable: the preflight's range checks."""
    return {s.var: (s.low, s.high) for s in own() if s.low is not None or s.high is not None}


def argv_vars() -> list[str]:
    """The role variables :func:`argv` takes, in its order."""
    return [s.var for s in SETTINGS if s.passed in ARGV]


def mix_text(shares: Mapping[str, Any] | None) -> str:
    """``{edit: 70, prose: 30}`` as ``specops tune --mix`` takes it (``edit=70,prose=30``); '' for no mix."""
    return ",".join(f"{k}={v}" for k, v in (shares or {}).items())


def jinja_int(value: Any) -> int:
    """``value | int`` as Jinja computes it: a number's whole part, text read as a whole number or else as a
    decimal one, 0 for anything else."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _words(s: Setting, value: Any, files_dir: str) -> list[str]:
    flag = str(s.flag)
    if s.passed == VALUE:
        return [flag, str(value)]
    if s.passed == IF_SET:
        return [flag, str(value)] if value else []
    if s.passed == POSITIVE:
        n = jinja_int(value)
        return [flag, str(n if n > 0 else s.cli_default)]
    if s.passed == FILES:
        return [f"{flag}={files_dir}/{posixpath.basename(str(p))}" for p in value or ()]
    if s.passed == MIX:
        return [flag, mix_text(dict(value))] if value else []
    return [flag] if value != s.default else []  # UNLESS_DEFAULT


def argv(values: Sequence[Any], files_dir: str) -> list[str]:
    """``specops tune``'s words for the role's settings: ``values`` those of :func:`argv_vars`, in that order (as
    ``query('ansible.builtin.vars', ...)`` returns them); ``files_dir``: where the host keeps its copy of the task
    files."""
    names = argv_vars()
    if len(values) != len(names):
        raise ValueError(f"{len(values)} values for {len(names)} settings ({', '.join(names)})")
    by_var = dict(zip(names, values, strict=True))
    return [word for s in SETTINGS if s.passed in ARGV for word in _words(s, by_var[s.var], files_dir)]
