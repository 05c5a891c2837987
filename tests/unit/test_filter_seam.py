"""The Ansible↔Python seam (issue 53 item 5), kept visible: every filter the roles and playbooks call is served by a
plugin file; every plugin filter is a function under src/specops, gathered by concern in specops.filters; a plugin
file holds no logic of its own (the sys.path fallback, one import, ``FilterModule.filters`` returning the union of
``FILTERS``); an adapter in specops.filters only converts what Ansible hands over and calls one specops function.
And the logic that left the plugins, tested where it now lives."""

from __future__ import annotations

import ast
import base64
import importlib
import inspect
import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from specops import capabilities, devices, profile, room, speedgate, unitfile
from specops.filters import json_object, optional_int, refused, refusing, strings
from specops.tabbyapi import deploy as tabby_deploy
from tests.unit.by_path import load, plugin_filters

REPO = Path(__file__).resolve().parents[2]
PLUGINS = sorted((REPO / "plugins" / "filter").glob("*.py"))
CONCERNS = sorted(p for p in (REPO / "src" / "specops" / "filters").glob("*.py") if p.stem != "__init__")
MAX_PLUGIN_LINES = 40
# a filter after a pipe (`x | specops_f(...)`, also across lines), or named to map/select
USED = re.compile(r"\|[ \t]*(specops_\w+)|\b(?:map|select|reject)\(\s*['\"](specops_\w+)")


def used_filters() -> dict[str, set[str]]:
    """Filter name -> the files (repo-relative) of roles/ and playbooks/ that call it."""
    files = [*REPO.glob("roles/**/*.yml"), *REPO.glob("roles/**/*.j2"), *REPO.glob("playbooks/*.yml"),
             *REPO.glob("*.yml")]
    used: dict[str, set[str]] = {}
    for path in files:
        for m in USED.finditer(path.read_text()):
            used.setdefault(m.group(1) or m.group(2), set()).add(str(path.relative_to(REPO)))
    return used


def served() -> dict[str, dict[str, object]]:
    """Plugin file stem -> its filters, each file loaded by path as Ansible loads it."""
    return {p.stem: load(str(p.relative_to(REPO)), f"seam_{p.stem}").FilterModule().filters() for p in PLUGINS}


def test_every_filter_the_roles_call_is_served():
    used = used_filters()
    assert len(used) > 40, "the pattern finds the roles' filters"  # the check can fail
    names = {name for filters in served().values() for name in filters}
    missing = {name: sorted(files) for name, files in used.items() if name not in names}
    assert not missing, f"filters the roles call that no plugins/filter/*.py serves: {missing}"


def test_no_filter_is_served_twice():
    seen: dict[str, str] = {}
    twice = []
    for plugin, filters in served().items():
        twice += [f"{name}: {seen[name]} and {plugin}" for name in filters if name in seen]
        seen.update(dict.fromkeys(filters, plugin))
    assert not twice


def test_every_plugin_filter_is_a_specops_function():
    src = (REPO / "src" / "specops").resolve()
    outside = []
    for plugin, filters in served().items():
        for name, func in filters.items():
            where = Path(inspect.getsourcefile(inspect.unwrap(func)) or "").resolve()  # type: ignore[arg-type]
            if not getattr(func, "__module__", "").startswith("specops.") or src not in where.parents:
                outside.append(f"{plugin}.py: {name} -> {getattr(func, '__module__', None)} ({where})")
    assert not outside


def test_the_plugins_serve_exactly_the_concerns_filters():
    concerns = {}
    for path in CONCERNS:
        concerns.update(importlib.import_module(f"specops.filters.{path.stem}").FILTERS)
    plugins = {name: func for filters in served().values() for name, func in filters.items()}
    assert plugins.keys() == concerns.keys()
    assert all(plugins[name] is concerns[name] for name in plugins)


def _fallback(node: ast.stmt) -> bool:
    """``try: import specops / except ImportError: sys.path.insert(...)``: the checkout's src when not installed."""
    return (isinstance(node, ast.Try) and len(node.body) == 1 and isinstance(node.body[0], ast.Import)
            and [a.name for a in node.body[0].names] == ["specops"] and len(node.handlers) == 1
            and all(isinstance(s, ast.Expr) and ast.unparse(s).startswith("sys.path.insert(")
                    for s in node.handlers[0].body))


def _filters_method(node: ast.stmt) -> bool:
    """``class FilterModule`` whose one method ``filters`` returns the FILTERS of specops.filters modules."""
    if not (isinstance(node, ast.ClassDef) and node.name == "FilterModule" and len(node.body) == 1):
        return False
    method = node.body[0]
    if not (isinstance(method, ast.FunctionDef) and method.name == "filters" and len(method.body) == 1
            and isinstance(method.body[0], ast.Return) and method.body[0].value is not None):
        return False
    names = [n for n in ast.walk(method.body[0].value) if isinstance(n, ast.Attribute)]
    return bool(names) and all(n.attr == "FILTERS" for n in names)


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: p.name)
def test_a_plugin_file_holds_no_logic(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_PLUGIN_LINES, f"{path.name}: put what it does in src/specops/filters/"
    tree = ast.parse(text)
    wrong = []
    for node in tree.body:
        ok = ((isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # the docstring
              or (isinstance(node, ast.Import) and all(a.name in ("sys", "specops") for a in node.names))
              or (isinstance(node, ast.ImportFrom) and node.module in ("__future__", "pathlib", "specops.filters"))
              or _fallback(node) or _filters_method(node))
        if not ok:
            wrong.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    functions = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.Lambda) and
                 getattr(n, "name", "") != "filters"]
    assert not wrong and not functions, (wrong, functions)


def _adapter_body_ok(func: ast.FunctionDef) -> bool:
    """Docstring, imports, then one ``return`` (alone or inside ``with refused(...)``): no branching, no loop."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    body = [s for s in body if not isinstance(s, ast.Import | ast.ImportFrom)]
    if len(body) != 1:
        return False
    (last,) = body
    if isinstance(last, ast.With):
        calls = [item.context_expr for item in last.items]
        return (len(calls) == 1 and isinstance(calls[0], ast.Call) and ast.unparse(calls[0].func) == "refused"
                and len(last.body) == 1 and isinstance(last.body[0], ast.Return))
    return isinstance(last, ast.Return)


@pytest.mark.parametrize("path", CONCERNS, ids=lambda p: p.name)
def test_an_adapter_only_converts_and_calls(path):
    tree = ast.parse(path.read_text())
    wrong = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if not _adapter_body_ok(node):
                wrong.append(f"{node.name} (line {node.lineno}): logic belongs in the specops module it calls")
        elif not ((isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
                  or isinstance(node, ast.Import | ast.ImportFrom)
                  or (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["FILTERS"])):
            wrong.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    assert not wrong


# ------------------------------------------------------------------ the one error mapping and the coercions


def test_refused_names_the_error_in_one_line_and_lets_others_through():
    with pytest.raises(AnsibleFilterError, match=r"^gate: no prompt$"), refused(ValueError, prefix="gate: "):
        raise ValueError("no prompt")
    with pytest.raises(KeyError), refused(ValueError):
        raise KeyError("x")

    def half(n: int) -> int:
        """Half of n."""
        if n % 2:
            raise ValueError(f"{n} is odd")
        return n // 2

    f = refusing(half, ValueError)
    assert f(4) == 2 and f.__name__ == "half" and f.__module__ == __name__ and f.__doc__ == "Half of n."
    with pytest.raises(AnsibleFilterError, match=r"^3 is odd$"):
        f(3)


def test_the_coercions():
    assert optional_int(None) is None and optional_int("") is None and optional_int("16") == 16
    assert strings(None) == [] and strings([1, "a"]) == ["1", "a"]
    assert json_object('{"a": 1}', "x") == {"a": 1} == json_object({"a": 1}, "x")
    with pytest.raises(ValueError, match=r"^the tune's result is not a JSON object$"):
        json_object("[1]", "the tune's result")


# ------------------------------------------------------------------ the logic that left the plugins


def test_the_role_profile_and_its_refusals():
    names = profile.role_vars()
    assert names[0].startswith("llama_server_") and len(names) == len(set(names))
    f = plugin_filters("specops")
    assert f.specops_knob_vars(None) == names
    assert profile.role_profile([None] * len(names), "cuda")["draft_n_max"] == 16
    with pytest.raises(profile.ProfileError, match=rf"^1 values for {len(names)} settings$"):
        profile.role_profile([None], "cpu")
    with pytest.raises(AnsibleFilterError, match=rf"^specops_knob_profile: 1 values for {len(names)} settings$"):
        f.specops_knob_profile([None], "cpu")
    with pytest.raises(AnsibleFilterError, match=r"^specops_knob_profile: the tune set llama_server_x, which is no"):
        f.specops_knob_profile([None] * len(names), "cpu", {"llama_server_x": 1})


def test_a_models_file_name():
    models = [{"name": "mine", "file": "mine.gguf"}, {"name": "t", "catalog": "smollm2-135m"}]
    assert profile.model_file("mine", models) == "mine.gguf"
    assert profile.model_file("t", models) == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert profile.model_file("smollm2-135m") == "SmolLM2-135M-Instruct.Q4_1.gguf"
    with pytest.raises(profile.ProfileError, match=r"^model 'nope' is neither in specops_models nor in the catalog"):
        profile.model_file("nope", models)
    with pytest.raises(AnsibleFilterError, match=r"^model 'nope' is neither in specops_models nor in the catalog"):
        plugin_filters("specops").specops_model_file("nope", models)


def test_the_capabilities_of_a_help_and_a_version_text():
    help_text = (REPO / "tests/fixtures/llama-server-0c1e57098/llama-server_help.txt").read_text()
    version = "version: 1 (0c1e570)\nbuilt with cc 13 for x86_64\n"
    caps = capabilities.parse(help_text, version)
    assert caps.to_dict() == capabilities.parse_version(version, capabilities.parse_help(help_text)).to_dict()
    assert caps.commit == "0c1e570" and caps.compiler == "cc 13 for x86_64" and caps.flags
    assert plugin_filters("specops").specops_capabilities(help_text, None) == capabilities.parse(help_text).to_dict()


def test_a_registered_device_listing():
    listing = "Available devices:\n  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23547 MiB free)\n"
    assert devices.run_problem({"rc": 0, "stdout": listing, "stderr": ""}, "cuda") == ""
    assert devices.run_problem({"rc": 0, "stdout": "", "stderr": listing}, "cuda") == ""
    assert devices.run_problem({"rc": 0, "stdout": "Available devices:\n"}, "cuda") == devices.device_problem(
        "cuda", "Available devices:\n\n", 0) != ""


def test_environment_words_are_sorted_and_refused_in_one_line():
    assert unitfile.env_assignments({"B": 1, "A": "x y"}) == ['"A=x y"', '"B=1"']
    with pytest.raises(AnsibleFilterError, match=r"not an environment variable name"):
        plugin_filters("specops").specops_systemd_env({"1A": "x"}, "llama_server_environment")


def _probe(rates: list[float], url: str) -> list[dict]:
    return [{"url": url, "prompt": i, "predicted_per_second": r, "predicted_n": 64} for i, r in enumerate(rates)]


def test_the_speed_gate_is_the_judgement_and_its_line():
    probe = {"requests": _probe([20, 21, 20, 22], "s") + _probe([10, 10.5, 10, 11], "p")}
    out = speedgate.gate(probe, probe, "s", "p", 1.0, "fallback", "llama-server.service", None, "side by side", 4)
    judged = speedgate.judge(probe, probe, "s", "p", 1.0, None, "side by side", 1.5)
    assert out == {**judged, "message": speedgate.message(judged, "fallback", "llama-server.service", 4, None)}
    f = plugin_filters("specops")
    assert f.specops_speed_gate(probe, probe, "s", "p", "1.0", "fallback", "llama-server.service", "", "side by side",
                                "4") == out
    with pytest.raises(AnsibleFilterError, match=r"^speed gate: the speed probe has no prompt answered by both"):
        f.specops_speed_gate({"requests": []}, {"requests": []}, "s", "p")


def test_the_gate_record_as_slurped():
    ok = {"content": base64.b64encode(b'{"verdict": "pays", "ratio": 1.3}').decode()}
    assert speedgate.gate_record(ok, "/r") == {"record": {"verdict": "pays", "ratio": 1.3}, "problem": ""}
    assert speedgate.gate_record(None, "/r") == {"record": {}, "problem": ""}


def test_the_room_checks_as_the_deploy_asks_them(tmp_path):
    assert room.build_estimate("cuda") == 2500 * room.MIB
    assert room.build_estimate(None) == room.build_estimate("cpu")
    assert room.build_estimate("new-backend") == max(room.BUILD_ESTIMATE_MIB.values()) * room.MIB
    assert room.mtp_check("", "draft-mtp") == [] and room.eagle3_check("/t", "draft-eagle3", "") == []
    assert room.context_check({"target": "", "draft": ""}, 4096, 1) == []
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    f = plugin_filters("room")
    for call, check in ((lambda: room.context_check({"target": str(bad)}, 4096, 1), "the context check"),
                        (lambda: room.mtp_check(str(bad), "draft-mtp"), "the draft-mtp check"),
                        (lambda: room.eagle3_check(str(bad), "draft-eagle3", str(bad)), "the draft-eagle3 check")):
        with pytest.raises(room.HeaderError, match=f"GGUF header for {check}: "):
            call()
    with pytest.raises(AnsibleFilterError, match=r"^cannot read a model's GGUF header for the context check: "):
        f.specops_context_problems({"target": str(bad), "draft": ""}, "4096", None)
    with pytest.raises(AnsibleFilterError, match=r"^cannot read the target's GGUF header for the draft-mtp check: "):
        f.specops_mtp_problems(str(bad), "draft-mtp")


def test_the_tabbyapi_profile_as_the_role_hands_it_over():
    values = tabby_deploy.role_values({"model": "/m/t", "draft_model": "", "ctx_size": "8192", "parallel": "None",
                                       "gpu_split": ["20", "22.5"], "tensor_parallel": "True", "host": "0.0.0.0"})
    assert values == {"model": "/m/t", "draft_model": None, "ctx_size": 8192, "parallel": None,
                      "gpu_split": [20, 22.5], "tensor_parallel": True, "host": "0.0.0.0"}
    role = {"model": "/m/t", "draft_model": "", "spec_type": "none", "ctx_size": "8192", "port": "5001"}
    assert tabby_deploy.config(role) == plugin_filters("tabbyapi").specops_tabbyapi_config(role)
    assert tabby_deploy.profile_problem(role) == ""
    assert tabby_deploy.profile_problem({**role, "port": "0"}) == "tabbyapi_port='0': must be a positive integer, got 0"
    assert tabby_deploy.profile_problem({**role, "draft_model": "/m/d"}).startswith(
        "tabbyapi_draft_model='/m/d': is set but spec_type is none")
    with pytest.raises(AnsibleFilterError, match=r"^TabbyAPI profile: port must be a positive integer"):
        plugin_filters("tabbyapi").specops_tabbyapi_config({**role, "port": "0"})


def test_a_draft_directory_that_is_not_there_is_named(tmp_path):
    line = tabby_deploy.hf_pair_problem(str(tmp_path / "t"), str(tmp_path / "d"), "tabbyapi_draft_model", "d")
    assert line.startswith("tabbyapi_draft_model='d': ") and len(line.splitlines()) == 1
    assert tabby_deploy.hf_pair_problem(str(tmp_path / "t"), str(tmp_path / "d")) == line.split(": ", 1)[1]
