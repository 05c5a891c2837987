"""The knob table (src/specops/knobs.py) is the one place llama-server settings are declared."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from specops.capabilities import parse_help, parse_options
from specops.commands.knobs import BEGIN, END
from specops.knobs import KNOBS, LEGACY, ROLE_NAMES_PENDING, SPEC, markdown_table
from specops.profile import ServerProfile

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
HELP = {SPEC: (FIX / "llama-server-0c1e57098" / "llama-server_help.txt").read_text(),
        LEGACY: (FIX / "llama-server-legacy" / "help.txt").read_text()}
CAPS = {era: parse_help(text) for era, text in HELP.items()}

# every program has these; the test cannot tell llama-server's from anyone else's
UNIVERSAL = {"--help", "--usage", "--version"}
# A module may name a llama-server spelling that is not llama-server's flag there, with a reason.
NOT_LLAMA_SERVER = {
    ("src/specops/bench/config.py", "--draft"): "specops bench's own --draft option (the draft model path)",
    ("src/specops/bench/capacity.py", "--ctx-size"): "specops bench's own --ctx-size option, in its advice",
    ("src/specops/tune/prepare.py", "--draft"): "specops tune's own --draft option (the draft model path)",
    ("src/specops/tune/slots.py", "--parallel"): "specops tune's own --parallel option (the service's slots)",
    ("src/specops/tune/settings.py", "--ctx-size"): "specops tune's own --ctx-size option (the tune settings table)",
    ("src/specops/tune/settings.py", "--threads"): "specops tune's own --threads option (the tune settings table)",
    ("src/specops/tune/settings.py", "--parallel"): "specops tune's own --parallel option (the tune settings table)",
    ("src/specops/exporter/config.py", "--timeout"): "specops exporter's own --timeout option",
    ("src/specops/exporter/config.py", "--log-file"): "specops exporter's own --log-file option",
    ("src/specops/exporter/fetch.py", "--api-key-file"): "specops exporter's own --api-key-file option",
    ("src/specops/exporter/series.py", "--api-key-file"): "specops exporter's own --api-key-file option",
    ("src/specops/exporter/series.py", "--log-file"): "specops exporter's own --log-file option",
}
_TOKEN = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def forbidden() -> set[str]:
    """Every spelling llama-server's --help lists (both eras), but one-letter ones (every tool has -m, -c, -t)."""
    flags = set().union(*(c.flags for c in CAPS.values()))
    return {f for f in flags if len(f) > 2 and f not in UNIVERSAL}


def scanned_files() -> list[Path]:
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]
    return sorted(f for f in files if f != ROOT / "src" / "specops" / "knobs.py")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            found.add(id(body[0].value))
    return found


def _own_options(tree: ast.AST) -> tuple[set[str], set[int]]:
    """Option names a module declares for its own command line (``add_argument("--x", ...)``): there,
    ``--x`` is that command's option even when llama-server has one of the same name."""
    names: set[str] = set()
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
                    nodes.add(id(arg))
    return names, nodes


def spelled_flags(source: str, rel: str, bad: set[str]) -> list[str]:
    """``path:line: flag`` for each llama-server spelling in a module's code (its string constants; docstrings
    and comments are prose for people and are not scanned)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    own, own_nodes = _own_options(tree)
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip | own_nodes:
            continue
        for flag in _TOKEN.findall(node.value):
            if flag in bad and flag not in own and (rel, flag) not in NOT_LLAMA_SERVER:
                hits.append(f"{rel}:{node.lineno}: {flag}")
    return hits


def test_no_module_but_the_knob_table_spells_a_llama_server_flag() -> None:
    bad = forbidden()
    assert {"--spec-type", "-md", "--cache-ram", "--draft-max", "--spec-draft-n-max", "-cram"} <= bad
    hits = [hit for path in scanned_files()
            for hit in spelled_flags(path.read_text(), path.relative_to(ROOT).as_posix(), bad)]
    assert not hits, "llama-server flags spelled outside src/specops/knobs.py (use knob(NAME)):\n" + "\n".join(hits)


def test_the_scan_finds_a_flag_in_code_but_not_in_docstrings_or_own_options() -> None:
    sample = ('"""Docs may say --spec-type."""\nARGS = ["-md", "x"]\nMSG = f"use --cache-ram {1}"\n'
              'def f(p):\n    p.add_argument("--port")\n    return "see --port", "--draft"\n')
    assert spelled_flags(sample, "src/x.py", forbidden()) == ["src/x.py:2: -md", "src/x.py:3: --cache-ram",
                                                              "src/x.py:6: --draft"]


# ---- YAML and Jinja: the roles and playbooks ask specops (its filters, its commands), never spell a flag -------------
# Roles and playbooks run other programs whose own options share a llama-server flag's name: program -> (those
# options, the files that run it with them). Each program is checked to declare them (add_argument); llama-server's
# own flags reach YAML only through the filters (specops_argv, specops_argv_spec_type, specops_argv_setting,
# specops_knob_flags, specops_devices_argv).
OTHER_PROGRAMS = {
    "src/specops/commands/bench.py": (("--draft",), ("playbooks/bench.yml",)),
    "src/specops/commands/tune.py": (("--draft", "--api-key-file"), ("roles/llama_server_tune/tasks/main.yml",
                                                                     "roles/llama_server_tune/tasks/run.yml")),
    "src/specops/commands/exporter.py": (("--timeout", "--api-key-file"),
                                         ("roles/exporter/templates/specops-exporter.service.j2",)),
    "src/specops/commands/fetch_model.py": (("--models-dir",), ("roles/models/tasks/fetch.yml",)),
    "src/specops/host/deploy_lock.py": (("--timeout",), ("roles/deploy_lock/tasks/acquire.yml",)),
    "src/specops/host/haproxy_admin.py": (("--timeout",), ("roles/loadbalancer/tasks/drain.yml",)),
    "src/specops/host/host_facts.py": (("--port", "--path"), ("roles/llama_server/tasks/inputs.yml",
                                                              "roles/tabbyapi/tasks/inputs.yml")),
    "src/specops/host/drain/cli.py": (("--timeout", "--api-key-file"), ("roles/llama_server/tasks/restart.yml",
                                                                    "roles/llama_server_speed_gate/tasks/main.yml")),
    "src/specops/host/speed_probe.py": (("--timeout", "--api-key-file"),
                                        ("roles/llama_server_speed_gate/tasks/main.yml",)),
    "src/specops/host/wait_healthy.py": (("--timeout",), ("roles/llama_server/tasks/rollback.yml",
                                                          "roles/llama_server/tasks/verify.yml",
                                                          "roles/systemd_unit/tasks/apply.yml")),
    "src/specops/host/probe.py": (("--api-key-file",), ("roles/llama_server/tasks/verify.yml",)),
}
# keys whose values are prose for people (task names, argument specs' descriptions, messages), as docstrings are
PROSE_KEYS = {"name", "description", "msg", "fail_msg", "success_msg"}
_JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)


def yaml_files() -> list[Path]:
    globs = ("roles/**/*.yml", "roles/**/*.yaml", "roles/**/*.j2", "playbooks/**/*.yml", "playbooks/**/*.j2")
    return sorted({f for g in globs for f in ROOT.glob(g)} | {ROOT / "deploy.yml"})


def _scalars(node: yaml.Node) -> Iterator[tuple[int, str]]:
    """(line, text) of each scalar of a YAML document but the values of :data:`PROSE_KEYS` (comments are gone)."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if not (isinstance(key, yaml.ScalarNode) and key.value in PROSE_KEYS):
                yield from _scalars(key)
                yield from _scalars(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item)
    elif isinstance(node, yaml.ScalarNode):
        yield node.start_mark.line + 1, node.value


def template_code(text: str, jinja: bool) -> list[tuple[int, str]]:
    """(line, text) of what a file runs: a template's lines but its comments (Jinja's, and the rendered file's own
    ``#`` lines), a YAML file's scalars but the prose (:func:`_scalars`); Jinja comments dropped from both."""
    if jinja:
        return [(n, line) for n, line in enumerate(_JINJA_COMMENT.sub(lambda m: "\n" * m[0].count("\n"), text)
                                                   .splitlines(), start=1) if not line.lstrip().startswith("#")]
    return [(n, _JINJA_COMMENT.sub("", value)) for doc in yaml.compose_all(text) if doc is not None
            for n, value in _scalars(doc)]


def yaml_spelled_flags(text: str, rel: str, bad: set[str]) -> list[str]:
    """``path:line: flag`` for each llama-server spelling a role, template or playbook runs with, but the options of
    the programs it runs (:data:`OTHER_PROGRAMS`)."""
    theirs = {flag for options, files in OTHER_PROGRAMS.values() if rel in files for flag in options}
    return [f"{rel}:{n}: {flag}" for n, value in template_code(text, rel.endswith(".j2"))
            for flag in _TOKEN.findall(value) if flag in bad and flag not in theirs]


def test_no_role_template_or_playbook_spells_a_llama_server_flag() -> None:
    bad = forbidden()
    hits = [hit for path in yaml_files()
            for hit in yaml_spelled_flags(path.read_text(), path.relative_to(ROOT).as_posix(), bad)]
    assert not hits, ("llama-server flags spelled in YAML or Jinja (ask specops: specops_argv, specops_argv_spec_type, "
                      "specops_argv_setting, specops_knob_flags; or list another program's own option in "
                      "OTHER_PROGRAMS):\n" + "\n".join(hits))


def test_the_yaml_scan_finds_a_flag_in_what_runs_but_not_in_prose() -> None:
    sample = ("# a comment says --spec-type\n- name: Note --spec-type\n  ansible.builtin.set_fact:\n"
              "    x: \"{{ argv.index('--spec-type') }}\"\n    y: >-\n      {# --cache-ram #}\n      a -md b\n"
              "  vars:\n    msg: set --draft-max\n")
    assert yaml_spelled_flags(sample, "roles/x/tasks/y.yml", forbidden()) == [
        "roles/x/tasks/y.yml:4: --spec-type", "roles/x/tasks/y.yml:5: -md"]
    template = "# --spec-type in the unit's comment\n{# --cache-ram\n #}\nExecStart=x --draft-max 3\n"
    assert yaml_spelled_flags(template, "roles/x/templates/y.j2", forbidden()) == [
        "roles/x/templates/y.j2:4: --draft-max"]
    tune = "- x: \"{{ ['--api-key-file', 1] }}\"\n"  # specops tune's own option there, llama-server's elsewhere
    assert yaml_spelled_flags(tune, "roles/llama_server_tune/tasks/main.yml", forbidden()) == []
    assert yaml_spelled_flags(tune, "roles/llama_server/tasks/argv.yml", forbidden()) == [
        "roles/llama_server/tasks/argv.yml:1: --api-key-file"]


@pytest.mark.parametrize("program", OTHER_PROGRAMS)
def test_the_other_programs_declare_the_options_the_roles_give_them(program: str) -> None:
    options, files = OTHER_PROGRAMS[program]
    declared, _nodes = _own_options(ast.parse((ROOT / program).read_text()))
    assert set(options) <= declared, f"{program} declares none of {sorted(set(options) - declared)}"
    assert all((ROOT / f).is_file() for f in files), files


def test_every_option_a_knob_touches_is_declared_whole() -> None:
    """All spellings of llama-server's option (in each era's --help) belong to the knob that uses it, so a
    command-line reader knows every alias, and each written spelling exists in the era it is written for."""
    for era, text in HELP.items():
        options = parse_options(text)
        for k in KNOBS:
            if k.spellings(era):  # argv writes the first one the build accepts
                assert any(CAPS[era].has(f) for f in k.spellings(era)), (era, k.name, k.spellings(era))
            for opt in options:
                if set(opt.names) & set(k.own_spellings):
                    assert set(opt.names) <= set(k.all_spellings), (era, k.name, opt.names)
        for k in KNOBS:
            for spec_type, flag in k.per_spec_type:
                if era == SPEC:
                    assert flag in CAPS[era].flags, (k.name, spec_type, flag)


def test_profile_has_one_field_per_knob() -> None:
    assert {f.name for f in fields(ServerProfile)} == {k.name for k in KNOBS}


def test_llama_cpp_defaults_are_those_of_its_help() -> None:
    """Where --help states a default, the table's llama_default says the same."""
    by_flag = {name: opt for opt in parse_options(HELP[SPEC]) for name in opt.names}
    checked = 0
    for k in KNOBS:
        if not k.flags or k.llama_default is None:
            continue
        m = re.search(r"\(default: '?([^,')]+)'?[,)]", by_flag[k.flag].description)
        if not m:
            continue
        stated = m.group(1).strip()
        if isinstance(k.llama_default, bool) and stated not in ("enabled", "disabled"):
            continue  # "enabled if number of slots is auto": said in the knob's doc
        expected = {True: "enabled", False: "disabled"}.get(k.llama_default, k.llama_default) \
            if isinstance(k.llama_default, bool) else k.llama_default
        if isinstance(expected, float):
            stated_value: object = float(stated)
        elif isinstance(expected, int):
            stated_value = int(stated)
        else:
            stated_value = stated
        assert stated_value == expected, (k.name, stated)
        checked += 1
    assert checked >= 8


def test_llama_cpps_per_type_defaults_are_those_of_its_help() -> None:
    """Each n-gram type's spelling of a knob carries llama.cpp's default under that type (the bench's ceiling takes
    the types' draft lengths from there), as --help states it."""
    by_flag = {name: opt for opt in parse_options(HELP[SPEC]) for name in opt.names}
    for k in KNOBS:
        assert {t for t, _f in k.per_spec_type} == {t for t, _v in k.llama_per_type}, k.name
        for spec_type, flag in k.per_spec_type:
            m = re.search(r"\(default: (\d+)\)", by_flag[flag].description)
            assert m and int(m.group(1)) == k.llama_default_for(spec_type), (k.name, spec_type, flag)


# ---- the service role agrees with the table --------------------------------------------------------------
ROLE = ROOT / "roles" / "llama_server"


def role_defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _unset(value: object) -> object:
    """The role writes "leave llama.cpp's default" as null or '' and lists as []."""
    if value == "" or value is None:
        return None
    return tuple(value) if isinstance(value, list) else value


@pytest.mark.parametrize("k", KNOBS, ids=lambda k: k.name)
def test_role_defaults_agree_with_the_table(k) -> None:
    defaults = role_defaults()
    var = k.role_var
    if not k.role:
        assert var not in defaults, f"{k.role_var} is in the role: set role=True for {k.name} in knobs.py"
        return
    assert var in defaults, f"roles/llama_server/defaults/main.yml has no {var}"
    value = defaults[var]
    if isinstance(value, str) and "{{" in value:  # computed by the role (model paths)
        assert k.default is None
        return
    if k.backend_defaults:  # null in the role: the profile takes the build's backend's from the table
        assert value is None, f"{var}: a per-backend default is null in the role, not {value!r}"
        return
    assert _unset(value) == _unset(k.default), f"{var}: role default {value!r}, knob table {k.default!r}"


def test_pending_role_renames_are_still_pending() -> None:
    defaults = role_defaults()
    for name, var in ROLE_NAMES_PENDING.items():
        assert var in defaults and f"llama_server_{name}" not in defaults, (
            f"{var} was renamed to llama_server_{name}: drop it from knobs.ROLE_NAMES_PENDING")


def test_the_draft_length_the_fit_assumes_is_the_deployed_one() -> None:
    from specops.cli import build_parser
    from specops.commands.fit import fit_params

    args = build_parser().parse_args(["fit", "t.gguf"])
    params = fit_params(args, None)
    defaults = role_defaults()
    from specops.knobs import knob

    # the role leaves it null: the profile takes the backend's default from the knob table
    assert defaults["llama_server_draft_n_max"] is None
    assert params.draft_n_max == knob("draft_n_max").default_for("cpu") == 2
    cuda = fit_params(build_parser().parse_args(["fit", "t.gguf", "--backend", "cuda"]), None)
    assert cuda.draft_n_max == knob("draft_n_max").default_for("cuda") == 16
    assert params.cache_type_v == defaults["llama_server_cache_type_v"]
    assert params.cache_ram_mib == defaults["llama_server_cache_ram_mib"]


def test_fit_reads_the_service_profile(tmp_path: Path) -> None:
    from specops.cli import build_parser
    from specops.commands.fit import fit_params

    profile = {"draft_n_max": 5, "ctx_size": "8192", "cache_type_k": "q8_0", "cache_ram_mib": 0, "parallel": 2}
    args = build_parser().parse_args(["fit", "t.gguf", "--parallel", "3", "--cache-ram", "512"])
    params = fit_params(args, profile)
    assert (params.draft_n_max, params.ctx_size, params.cache_type_k) == (5, 8192, "q8_0")
    assert (params.parallel, params.cache_ram_mib) == (3, 512)  # options override the profile
    args = build_parser().parse_args(["fit", "t.gguf", "--draft-n-max", "7", "-ctk", "q4_0"])
    assert (fit_params(args, None).draft_n_max, fit_params(args, None).cache_type_k) == (7, "q4_0")


# ---- the README's settings table is generated ------------------------------------------------------------
def test_role_readme_settings_table_is_the_generated_one() -> None:
    text = (ROLE / "README.md").read_text()
    assert BEGIN in text and END in text, f"roles/llama_server/README.md needs the markers {BEGIN} ... {END}"
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert section.strip() == markdown_table().strip(), (
        "roles/llama_server/README.md is out of date: run `specops knobs --update`")


def test_markdown_table_has_one_row_per_knob() -> None:
    rows = [line for line in markdown_table().splitlines() if line.startswith("| `")]
    assert len(rows) == len(KNOBS)
    assert any("`llama_server_draft_n_max` | `2` (per backend, cuda: `16`) | `3` | `--spec-draft-n-max` / "
               "`--draft-max`, `--draft`" in r
               for r in rows)


def test_a_null_in_the_profile_is_llama_servers_own_default(tmp_path: Path) -> None:
    """A profile that leaves the prompt cache and the draft length unset runs llama-server with its own
    defaults (8192 MiB, 3 tokens): the fit counts those, not the role's."""
    from specops.cli import build_parser
    from specops.commands.fit import _profile, fit_params

    path = tmp_path / "profile.yml"
    path.write_text("draft_model: /srv/d.gguf\ncache_ram_mib: null\ndraft_n_max: null\nparallel: 2\n")
    params = fit_params(build_parser().parse_args(["fit", "t.gguf"]), _profile(path))
    assert (params.cache_ram_mib, params.draft_n_max, params.parallel, params.ctx_size) == (8192, 3, 2, 4096)


# ---- the role's argument specs agree with the table ------------------------------------------------------
def role_specs() -> dict:
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("k", [k for k in KNOBS if k.role], ids=lambda k: k.name)
def test_argument_specs_agree_with_the_table(k) -> None:
    """Every role knob is described in meta/argument_specs.yml with the table's type, choices and default: the
    first play's type checks (validate_argument_spec) are the table's."""
    spec = role_specs().get(k.role_var)
    assert spec is not None, f"roles/llama_server/meta/argument_specs.yml does not describe {k.role_var}"
    kind = spec.get("type", "str")
    assert kind == k.type, f"{k.role_var}: argument_specs type {kind!r}, table {k.type!r}"
    if k.listed:  # a comma-separated list of choices: Ansible would refuse a list, the first play checks each member
        assert "choices" not in spec, f"{k.role_var}: a listed setting's argument specs carry no choices"
    elif k.choices:  # null among them: the variable may leave the setting to llama-server
        choices = tuple(c for c in spec.get("choices", ()) if c is not None)
        assert choices == tuple(k.choices), f"{k.role_var}: choices {choices}, table {k.choices}"
    if "default" in spec:
        assert _unset(spec["default"]) == _unset(k.default), (
            f"{k.role_var}: argument_specs default {spec['default']!r}, table {k.default!r}")


def test_argument_specs_describe_no_setting_the_table_lacks() -> None:
    """A llama_server_<name> option named after a llama-server setting that is not in the table would be a
    second declaration of it."""
    role_vars = {k.role_var for k in KNOBS if k.role}
    known = {k.name for k in KNOBS}
    for var in role_specs():
        name = var.removeprefix("llama_server_")
        assert name not in known or var in role_vars, f"{var} is a knob the table keeps out of the role"


def test_ranges_are_declared_once_in_the_table_and_both_checks_use_them() -> None:
    """The preflight (deploycheck.RANGES) and the profile (ServerProfile.validate) take each llama-server setting's
    bounds from its knob: one edit of a knob's low/high moves both (issue 41)."""
    from specops.deploycheck import RANGES, check_inputs
    from specops.knobs import knob, ranges
    from specops.profile import ProfileError, ServerProfile

    assert ranges()["draft_n_max"] == (0, None) and ranges()["draft_p_min"] == (0, 1)
    for name, bounds in ranges().items():
        k = knob(name)
        if k.role:
            assert RANGES[k.role_var] == bounds, name
        low, high = bounds
        bad = (low - 1) if low is not None else (high + 1)
        with pytest.raises(ProfileError, match=rf"^{name} must be "):
            ServerProfile.from_dict({"model": "/m.gguf", name: bad})
    assert RANGES["llama_server_baseline_port"] == knob("port").low_high
    [problem] = check_inputs({"llama_server_draft_p_min": 1.5}, {"llama_server_draft_p_min": {"type": "float"}})
    assert problem.startswith("llama_server_draft_p_min=1.5: must be at most 1")
