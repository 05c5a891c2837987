"""The tune's settings are declared once, in the tune settings table (src/specops/tune/settings.py; issue 64 item 4):
the role's defaults and argument specs (their tune blocks, `specops knobs --update`), the preflight's ranges,
`specops tune`'s defaults and the tune's command line in roles/llama_server_tune/tasks/main.yml all come from it.

The command line: the task's argv, rendered as Ansible renders it, says what the hand-written Jinja it replaced said,
flag for flag and value for value, for the variable sets below (each expected list written by hand from that old
template, which is kept here, frozen, and rendered too)."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import FilterModule as AnsibleCoreFilters
from jinja2.nativetypes import NativeEnvironment

from specops import knobgen
from specops.cli import build_parser
from specops.deploycheck import RANGES
from specops.knobs import knob
from specops.tune import settings
from specops.tune.settings import KNOBS, ROLE, SAME_DEFAULT, SETTINGS, TUNE, Setting
from tests.unit.by_path import plugin_filters

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
ROLE_DIR = REPO / "roles" / "llama_server_tune"   # the tune's role: its settings
SERVER_DIR = REPO / "roles" / "llama_server"       # the service's role: the settings the tune takes from it


def _defaults(role: Path = ROLE_DIR) -> dict[str, Any]:
    return yaml.safe_load((role / "defaults" / "main.yml").read_text())


def _specs(role: Path = ROLE_DIR) -> dict[str, Any]:
    return yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def _yaml(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


# ---- the role's copies -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", settings.own(), ids=lambda s: s.name)
def test_the_role_says_what_the_table_says(s: Setting) -> None:
    defaults, spec = _defaults(), _specs()[s.var]
    assert spec["type"] == s.type and spec.get("elements") == s.elements
    assert s.doc in " ".join(spec["description"].split())
    assert tuple(spec.get("choices", ())) == s.choices
    if s.computed:
        assert "{{" in defaults[s.var] and "default" not in spec
        return
    assert defaults[s.var] == spec["default"] == _yaml(s.default)
    if s.low is not None or s.high is not None:
        assert RANGES[s.var] == (s.low, s.high)
        assert knobgen.range_text(s) in spec["description"]


def test_every_tune_variable_of_the_role_is_in_the_table() -> None:
    tune_vars = {v for v in _defaults() if v == "llama_server_tune" or v.startswith("llama_server_tune_")}
    # (the running service's address is no setting: roles/llama_server's include gives it)
    assert tune_vars - {"llama_server_tune_service_url"} == {s.var for s in settings.own()}
    assert len(tune_vars) == 15  # llama_server_tune_rule (issue 78), the service_url given by the include


@pytest.mark.parametrize("s", [s for s in SETTINGS if s.owner != TUNE], ids=lambda s: s.name)
def test_what_the_tune_takes_from_the_role_s_other_settings(s: Setting) -> None:
    """The context, threads and slots are the knob table's (read from it); the speed gate's idle timeout is the
    role's, held equal here."""
    if s.owner == KNOBS:
        k = knob(s.name)
        assert (k.role_var, k.type, k.default, k.low, k.high) == (s.var, s.type, s.default, s.low, s.high)
    else:
        assert s.owner == ROLE
        assert _defaults(SERVER_DIR)[s.var] == _specs(SERVER_DIR)[s.var]["default"] == s.default
        assert _specs(SERVER_DIR)[s.var]["type"] == s.type
        assert s.var not in knobgen.tune_defaults_block()


def test_a_new_tune_setting_is_one_edit_of_the_table(tmp_path, monkeypatch) -> None:
    role = tmp_path / "llama_server_tune"
    shutil.copytree(ROLE_DIR, role)
    shutil.copytree(REPO / "roles" / "llama_server", tmp_path / "llama_server")
    new = Setting("tune_demo", "int", "a demo setting", "--demo", settings.VALUE, default=7, low=1)
    monkeypatch.setattr(settings, "SETTINGS", (*SETTINGS, new))
    changed = knobgen.update(tmp_path / "llama_server")
    assert sorted(str(p.relative_to(tmp_path)) for p in changed) == [
        "llama_server_tune/defaults/main.yml", "llama_server_tune/meta/argument_specs.yml"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert defaults["llama_server_tune_demo"] == 7
    assert spec["llama_server_tune_demo"] == {"type": "int", "default": 7, "description": "a demo setting (>= 1)"}
    assert settings.argv_vars()[-1] == "llama_server_tune_demo"
    assert knobgen.update(tmp_path / "llama_server") == []  # a rerun changes nothing


# ---- specops tune's options -------------------------------------------------------------------------------------


def _tune_parser():
    sub = build_parser("tune")._subparsers._group_actions[0]  # type: ignore[union-attr]
    return sub.choices["tune"]


def test_specops_tune_takes_its_defaults_from_the_table() -> None:
    options = {o: a for a in _tune_parser()._actions for o in a.option_strings}
    for s in SETTINGS:
        if s.flag is None:
            continue
        assert s.flag in options, f"specops tune has no {s.flag} for {s.var}"
        if s.passed in SAME_DEFAULT:
            assert options[s.flag].default == s.cli_default, s.name
    # what they were before the table (commands/tune.py wrote them by hand)
    d = _tune_parser().parse_args(["--target", "t.gguf"])
    assert (d.budget, d.lengths, d.max_tokens, d.probe_tokens, d.limit_per_workload, d.ctx_size, d.parallel,
            d.idle_timeout, d.threads) == (15.0, "2,4,8,12,16", 96, 48, 12, 4096, 1, 120.0, None)
    assert type(d.budget) is float and type(d.idle_timeout) is float


def test_a_setting_the_deploy_passes_names_its_option_and_only_then() -> None:
    with pytest.raises(ValueError, match="has its option, and only one"):
        Setting("tune_x", "int", "x", passed=settings.VALUE)
    with pytest.raises(ValueError, match="has its option, and only one"):
        Setting("tune_x", "int", "x", "--x")
    with pytest.raises(ValueError, match="passed 'sometimes' is none of"):
        Setting("tune_x", "int", "x", "--x", "sometimes")


def test_jinja_int_is_jinjas() -> None:
    env = NativeEnvironment()
    for value in (4096, "8192", "12.7", 12.7, "", None, "abc", True, -1, "-3"):
        assert settings.jinja_int(value) == env.from_string("{{ v | int }}").render(v=value), value


# ---- the command line: the old template, frozen, and the task's now ------------------------------------------------

# roles/llama_server_tune/tasks/main.yml's argv before the table (commit d0c05c9), verbatim
OLD_ARGV = """
          {{ [llama_server_tune_python, '-m', 'specops', 'tune',
              '--llama-prefix', llama_server_install_root ~ '/' ~ llama_server_build_id,
              '--target', llama_server_target_model | trim]
             + (['--draft', llama_server_draft_model | trim] if _llama_server_tune_scope.draft else [])
             + _llama_server_tune_scope.args
             + ['--budget', llama_server_tune_budget | string, '--max-tokens', llama_server_tune_max_tokens | string,
                '--probe-tokens', llama_server_tune_probe_tokens | string,
                '--limit-per-workload', llama_server_tune_limit_per_workload | string,
                '--ctx-size', ((llama_server_ctx_size | int) if (llama_server_ctx_size | int) > 0 else 4096) | string,
                '--work-dir', _llama_server_tune_unit.work_dir ~ '/' ~ now(utc=true).strftime('%Y%m%dT%H%M%SZ'),
                '--out', llama_server_state_dir ~ '/tune.json', '--quiet',
                '--progress-file', llama_server_state_dir ~ '/tune-progress.txt']
             + (llama_server_tune_tasks | map('basename')
                | map('regex_replace', '^', '--tasks=' ~ _llama_server_tune_unit.tasks_dir ~ '/') | list)
             + (['--mix', llama_server_tune_mix | specops_tune_mix_arg] if llama_server_tune_mix else [])
             + (['--threads', llama_server_threads | string] if llama_server_threads else [])
             + (['--parallel', llama_server_parallel | string] if llama_server_parallel else [])
             + (['--target-sha256', _llama_server_tune_sha[llama_server_target_model | trim]]
                if (llama_server_target_model | trim) in _llama_server_tune_sha else [])
             + (['--draft-sha256', _llama_server_tune_sha[llama_server_draft_model | trim]]
                if _llama_server_tune_scope.draft and (llama_server_draft_model | trim) in _llama_server_tune_sha else [])
             + ([] if llama_server_tune_refresh | bool or llama_server_tune_own | default(false) | bool
                else ['--reuse', llama_server_state_dir ~ '/tune.json'])
             + ([] if llama_server_tune_share == 'kind' else ['--own-only'])
             + (['--service-url', 'http://' ~ _llama_server_check_host ~ ':' ~ llama_server_port,
                 '--idle-timeout', llama_server_speed_gate_idle_timeout | string]
                if _llama_server_live_service.status.ActiveState | default('') == 'active' else [])
             + (['--api-key-file', llama_server_api_key_file]
                if llama_server_api_key_file and _llama_server_live_service.status.ActiveState | default('') == 'active' else [])
             + ['--heartbeat', _llama_server_tune_unit.heartbeat,
                '--heartbeat-timeout', _llama_server_tune_unit.heartbeat_timeout | string]
             + (['--lock', _llama_server_tune_unit.lock, '--lock-run-id', _llama_server_tune_unit.run_id]
                if _llama_server_tune_unit.lock else []) }}
"""  # noqa: E501 (verbatim)

SHA_T, SHA_D = "a" * 64, "b" * 64
PY, PREFIX, STATE = "/usr/bin/python3", "/opt/llama.cpp/0c1e57098-cpu-x", "/var/lib/specops"
HEAD = [PY, "-m", "specops", "tune", "--llama-prefix", PREFIX, "--target", "/srv/m/t.gguf"]
PATHS = ["--work-dir", f"{STATE}/tune-work/20260102T030405Z", "--out", f"{STATE}/tune.json", "--quiet",
         "--progress-file", f"{STATE}/tune-progress.txt"]
TAIL = ["--heartbeat", "/run/specops/tune-heartbeat", "--heartbeat-timeout", "60"]
BASE: dict[str, Any] = {  # the role's defaults, a CPU host, its service not running, no deploy lock
    "llama_server_tune_python": PY, "llama_server_install_root": "/opt/llama.cpp",
    "llama_server_build_id": "0c1e57098-cpu-x", "llama_server_target_model": " /srv/m/t.gguf\n",
    "llama_server_draft_model": "/srv/m/d.gguf", "llama_server_state_dir": STATE,
    "_llama_server_tune_scope": {"draft": True, "args": ["--lengths", "2,4,8,12,16"]},
    "llama_server_tune_budget": 15, "llama_server_tune_max_tokens": 96, "llama_server_tune_probe_tokens": 48,
    "llama_server_tune_limit_per_workload": 12, "llama_server_ctx_size": 4096, "llama_server_tune_tasks": [],
    "llama_server_tune_rule": "",  # (the old template had no rule: unset, specops tune's default applies)
    "llama_server_tune_mix": {}, "llama_server_threads": None, "llama_server_parallel": 1,
    "_llama_server_tune_sha": {}, "llama_server_tune_refresh": False, "llama_server_tune_share": "kind",
    "_llama_server_check_host": "127.0.0.1", "llama_server_port": 8080, "llama_server_speed_gate_idle_timeout": 120,
    # (roles/llama_server's include gives the tune role the service's address, made of the two above)
    "llama_server_tune_service_url": "http://127.0.0.1:8080",
    "_llama_server_tune_live_service": {"status": {"ActiveState": "inactive"}}, "llama_server_api_key_file": "",
    "_llama_server_tune_unit": {"work_dir": f"{STATE}/tune-work", "tasks_dir": f"{STATE}/tune-tasks",
                                "heartbeat": "/run/specops/tune-heartbeat", "heartbeat_timeout": 60, "lock": "",
                                "run_id": "r-1"},
}
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "the role's defaults": ({}, [
        *HEAD, "--draft", "/srv/m/d.gguf", "--lengths", "2,4,8,12,16",
        "--budget", "15", "--max-tokens", "96", "--probe-tokens", "48", "--limit-per-workload", "12",
        "--ctx-size", "4096", *PATHS, "--parallel", "1", "--reuse", f"{STATE}/tune.json", *TAIL]),
    "everything set, a live keyed service, the lock": ({
        "_llama_server_tune_scope": {"draft": True, "args": ["--lengths", "8", "--ngram", "", "--no-default"]},
        "llama_server_tune_budget": "2.5", "llama_server_tune_max_tokens": 24, "llama_server_tune_probe_tokens": "24",
        "llama_server_tune_limit_per_workload": 2, "llama_server_ctx_size": 0,
        "llama_server_tune_tasks": ["~/traffic/code.jsonl", "/data/edit.jsonl"],
        "llama_server_tune_mix": {"edit": 70, "prose": 30}, "llama_server_threads": 4, "llama_server_parallel": 2,
        "_llama_server_tune_sha": {"/srv/m/t.gguf": SHA_T, "/srv/m/d.gguf": SHA_D}, "llama_server_tune_refresh": True,
        "llama_server_tune_share": "off", "_llama_server_tune_live_service": {"status": {"ActiveState": "active"}},
        "llama_server_api_key_file": "/etc/specops/key", "llama_server_speed_gate_idle_timeout": 30,
        "_llama_server_tune_unit": {**BASE["_llama_server_tune_unit"], "lock": "/run/specops/deploy.lock"},
    }, [
        *HEAD, "--draft", "/srv/m/d.gguf", "--lengths", "8", "--ngram", "", "--no-default",
        "--budget", "2.5", "--max-tokens", "24", "--probe-tokens", "24", "--limit-per-workload", "2",
        "--ctx-size", "4096", *PATHS, f"--tasks={STATE}/tune-tasks/code.jsonl",
        f"--tasks={STATE}/tune-tasks/edit.jsonl",
        "--mix", "edit=70,prose=30", "--threads", "4", "--parallel", "2", "--target-sha256", SHA_T,
        "--draft-sha256", SHA_D, "--own-only", "--service-url", "http://127.0.0.1:8080", "--idle-timeout", "30",
        "--api-key-file", "/etc/specops/key", *TAIL, "--lock", "/run/specops/deploy.lock", "--lock-run-id", "r-1"]),
    "no draft, text values, a host tuning for itself": ({
        "_llama_server_tune_scope": {"draft": False, "args": []}, "llama_server_tune_budget": 15.0,
        "llama_server_ctx_size": "8192", "llama_server_threads": 0, "llama_server_parallel": None,
        "llama_server_tune_tasks": ["mine.jsonl"], "llama_server_tune_own": True,
        "_llama_server_tune_sha": {"/srv/m/t.gguf": SHA_T, "/srv/m/d.gguf": SHA_D},
        "llama_server_api_key_file": "/etc/specops/key",  # the service is not running: not passed
    }, [
        *HEAD, "--budget", "15.0", "--max-tokens", "96", "--probe-tokens", "48", "--limit-per-workload", "12",
        "--ctx-size", "8192", *PATHS, f"--tasks={STATE}/tune-tasks/mine.jsonl", "--target-sha256", SHA_T, *TAIL]),
    "a context below 0, threads as text": ({"llama_server_ctx_size": -1, "llama_server_threads": "2"}, [
        *HEAD, "--draft", "/srv/m/d.gguf", "--lengths", "2,4,8,12,16",
        "--budget", "15", "--max-tokens", "96", "--probe-tokens", "48", "--limit-per-workload", "12",
        "--ctx-size", "4096", *PATHS, "--threads", "2", "--parallel", "1", "--reuse", f"{STATE}/tune.json", *TAIL]),
}


def _env(role_vars: dict[str, Any]) -> NativeEnvironment:
    """Jinja as Ansible templates the task: its core filters, the project's tune filters, ``now`` and the vars
    lookup over ``role_vars``."""
    env = NativeEnvironment()
    env.filters.update(AnsibleCoreFilters().filters())
    env.filters.update(vars(plugin_filters("tune")))
    env.filters["specops_tune_mix_arg"] = settings.mix_text  # the old template's filter
    env.globals["now"] = lambda utc=False: datetime(2026, 1, 2, 3, 4, 5)

    def query(plugin: str, *terms: str, default: Any = None) -> list[Any]:
        assert plugin == "ansible.builtin.vars"
        return [role_vars.get(t, default) for t in terms]

    env.globals["query"] = query
    return env


def _render(template: str, role_vars: dict[str, Any]) -> list[str]:
    return _env(role_vars).from_string(template.strip()).render(**role_vars)


def _task_argv() -> str:
    """The tune's command line as the role composes it: main.yml's, then the live service's words that run.yml
    adds where the tune runs (one template: the second list appended to the first)."""
    tasks = yaml.safe_load((ROLE_DIR / "tasks" / "main.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    task = next(t for t in block if t["name"] == "Tune - its command line")
    argv = task["ansible.builtin.set_fact"]["_llama_server_tune_argv"].strip()
    run = yaml.safe_load((ROLE_DIR / "tasks" / "run.yml").read_text())
    start = next(t for t in run[0]["block"] if t["name"].startswith("Tune - start specops tune"))
    live = start["vars"]["_llama_server_tune_live_argv"].strip()
    assert "_llama_server_tune_argv + _llama_server_tune_live_argv" in start["ansible.builtin.shell"]  # its exec
    assert argv.startswith("{{") and argv.endswith("}}") and live.startswith("{{") and live.endswith("}}")
    return f"{{{{ ({argv[2:-2]}) + ({live[2:-2]}) }}}}"


def _groups(argv: list[str]) -> Counter[tuple[str, ...]]:
    """Each option with the words that follow it, counted: the same flags and values, in any order."""
    groups: list[list[str]] = [[]]
    for word in argv[4:]:
        if word.startswith("--"):
            groups.append([])
        groups[-1].append(word)
    return Counter(tuple(g) for g in groups if g)


@pytest.mark.parametrize("case", CASES)
def test_the_tasks_command_line_says_what_the_old_template_said(case: str) -> None:
    changes, expected = CASES[case]
    role_vars = {**BASE, **changes}
    # (the old template's name for the live service's state, before the tune was a role of its own)
    old_vars = {**role_vars, "_llama_server_live_service": role_vars["_llama_server_tune_live_service"]}
    assert _render(OLD_ARGV, old_vars) == expected  # the hand-written list is what the old template gave
    new = _render(_task_argv(), role_vars)
    assert new[:4] == expected[:4] and _groups(new) == _groups(expected)
    parser = _tune_parser()
    assert vars(parser.parse_args(new[4:])) == vars(parser.parse_args(expected[4:]))
    # and the task files keep their order (--tasks appends)
    assert [w for w in new if w.startswith("--tasks=")] == [w for w in expected if w.startswith("--tasks=")]


@pytest.mark.parametrize("case", CASES)
def test_the_filter_writes_the_settings_words(case: str) -> None:
    changes, expected = CASES[case]
    role_vars = {**BASE, **changes}
    f = plugin_filters("tune")
    names = f.specops_tune_setting_vars()
    got = f.specops_tune_setting_args([role_vars[n] for n in names], role_vars["_llama_server_tune_unit"]["tasks_dir"])
    flags = {s.flag for s in SETTINGS if s.passed in settings.ARGV}
    mine = Counter(g for g in _groups(expected).elements() if g[0].split("=")[0] in flags)
    assert _groups(["", "", "", "", *got]) == mine


def test_the_filter_refuses_a_wrong_count_in_one_line() -> None:
    with pytest.raises(AnsibleFilterError, match=r"^specops_tune_setting_args: 1 values for 11 settings"):
        plugin_filters("tune").specops_tune_setting_args([1], "/d")


def test_the_output_rule_is_passed_where_the_operator_sets_it_and_the_role_defaults_to_equivalent() -> None:
    """Issue 78 item 3: llama_server_tune_rule, one word, equivalent by default (the role's defaults file)."""
    assert _defaults()["llama_server_tune_rule"] == "equivalent" == settings.cli_defaults()["rule"]
    values = {**BASE, "llama_server_tune_rule": "identical"}
    words = settings.argv([values.get(v) for v in settings.argv_vars()], "/var/lib/specops/tune-tasks")
    i = words.index("--rule")
    assert words[i + 1] == "identical"
    parser = _tune_parser()
    assert parser.parse_args(["--target", "t.gguf"]).rule == "equivalent"
    with pytest.raises(SystemExit):
        parser.parse_args(["--target", "t.gguf", "--rule", "same"])
