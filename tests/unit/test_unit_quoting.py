"""Quoting as a property: the llama-server unit template, rendered with hostile values (spaces, %, $, quotes,
backslashes, ;, non-ASCII) in every place a value reaches a unit line, is accepted by `systemd-analyze verify`
without a single complaint; values a unit cannot hold (newlines, control characters, relative paths) are
refused with one line naming the variable.

The template is rendered by Jinja2 the way Ansible's template module does (trim_blocks) with the project's
filter plugin; tests/integration/test_deploy_inputs.py checks on the lab host that systemd reads the values back
unchanged, and serves from such a path.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from specops.deploycheck import check_inputs
from specops.unitfile import UnitValueError, absolute_path, env_assignment, exec_line, line_value

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llama_server"
UNIT = "llama-server-speculative.service"

pytestmark = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


def _plugin_filters() -> dict:
    spec = importlib.util.spec_from_file_location("specops_filter_plugin", REPO / "plugins" / "filter" / "specops.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


ENV = Environment(loader=FileSystemLoader(str(ROLE / "templates")), trim_blocks=True, undefined=StrictUndefined,
                  keep_trailing_newline=False)
ENV.filters.update(_plugin_filters())
ENV.filters.setdefault("bool", lambda v: v is True or str(v).strip().lower() in {"true", "yes", "on", "1", "y", "t"})
ROLE_VARS = {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
             **yaml.safe_load((ROLE / "vars" / "main.yml").read_text())}
ROLE_VARS["llama_server_api_key_credential_arg"] = "%d/" + ROLE_VARS["llama_server_api_key_credential"]

# what users put in paths and values: blanks, specifier and variable signs, quotes, escapes, separators, UTF-8
HOSTILE = st.text(alphabet=st.sampled_from(list("ab Z09 %$\"'\\;#=-_.,:@~*?[]{}()&|<>!^`+") + list("öé中ß😀\u00a0")),
                  min_size=1, max_size=10)
COMPONENT = HOSTILE.filter(lambda c: c not in (".", ".."))
# systemd refuses an executable path with a quote or a backslash however it is written (refused in preflight)
EXE_COMPONENT = COMPONENT.filter(lambda c: not set(c) & set("\"'\\"))


def render(root: Path, models_dir: Path, binary: Path, key_file: Path, alias: str, env_value: str,
           description: str) -> Path:
    argv = [str(binary), "--model", str(models_dir / "model.gguf"), "--alias", alias,
            "--api-key-file", ROLE_VARS["llama_server_api_key_credential_arg"], "--spec-type", "draft-simple"]
    variables = {**ROLE_VARS, "ansible_managed": "test", "llama_server_backend": "cpu",
                 "_llama_server_sandbox": ROLE_VARS["llama_server_backend_sandbox"]["cpu"],
                 "llama_server_models_dir": str(models_dir), "llama_server_api_key_file": str(key_file),
                 "llama_server_environment": {"SPECOPS_HOSTILE": env_value, "GGML_CPU_TILED_MM": "0"},
                 "_unit": {"argv": argv, "build_id": "test", "description": description}}
    unit = root / UNIT
    unit.write_text(ENV.get_template("llama-server.service.j2").render(**variables) + "\n", encoding="utf-8")
    return unit


def complaints(unit: Path) -> list[str]:
    """What systemd-analyze verify says about this unit (empty: accepted as written)."""
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False,
                          env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})
    lines = [line for line in proc.stderr.splitlines() if unit.name in line]
    if proc.returncode != 0 and not lines:
        lines = [f"exit {proc.returncode}: {proc.stderr.strip()}"]
    return lines


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dirs=st.lists(COMPONENT, min_size=1, max_size=3), bin_dir=EXE_COMPONENT, key_dir=COMPONENT, alias=HOSTILE,
       env_value=st.text(alphabet=st.sampled_from(list("a %$\"'\\;=ö中")), max_size=8),
       description=HOSTILE.filter(lambda d: d == d.strip(" ") and not d.endswith("\\")))
def test_hostile_values_render_to_a_unit_systemd_accepts(tmp_path_factory, dirs, bin_dir, key_dir, alias,
                                                         env_value, description):
    root = tmp_path_factory.mktemp("unit")
    models_dir = root.joinpath(*dirs)
    models_dir.mkdir(parents=True, exist_ok=True)
    binary = root / bin_dir / "llama-server"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)          # verify checks ExecStart's binary: the quoted path must resolve to this file
    key_file = root / key_dir / "api-key"
    unit = render(root, models_dir, binary, key_file, alias, env_value, "llama.cpp " + description)
    assert complaints(unit) == [], unit.read_text()


def test_the_check_sees_a_misquoted_path(tmp_path):
    """The property can fail: the path as the template used to write it (unquoted) is reported."""
    models = tmp_path / "spec ops" / "models"
    models.mkdir(parents=True)
    unit = tmp_path / UNIT
    unit.write_text(f"[Service]\nExecStart=/bin/true\nReadOnlyPaths={models}\n")
    assert any("not absolute" in line for line in complaints(unit))
    unit.write_text("[Service]\nExecStart=/bin/true\nDescription=50%x\n")
    assert complaints(unit)


@pytest.mark.parametrize("value,fragment", [
    ("/srv/spec ops\n/models", "a newline"),
    ("/srv/models\r", "a carriage return"),
    ("/srv/mod\tels", "a tab"),
    ("/srv/\x1bmodels", "U+001B"),
    ("srv/models", "not an absolute path"),
    ("./models", "not an absolute path"),
    ("/srv/../models", ". or .."),
])
def test_unrepresentable_paths_are_refused_in_one_line(value, fragment):
    with pytest.raises(UnitValueError) as err:
        absolute_path(value, "llama_server_models_dir")
    message = str(err.value)
    assert fragment in message and "llama_server_models_dir=" in message and "\n" not in message
    problems = check_inputs({"llama_server_models_dir": value}, {"llama_server_models_dir": {"type": "str"}})
    assert len(problems) == 1 and fragment in problems[0] and "\n" not in problems[0]


def test_other_unit_values_refuse_what_a_line_cannot_hold():
    with pytest.raises(UnitValueError, match="llama_server_alias"):
        exec_line(["/bin/llama-server", "--alias", "a\nb"], what="llama_server_alias")
    with pytest.raises(UnitValueError, match="not an environment variable name"):
        env_assignment("1BAD", "x", "llama_server_environment")
    with pytest.raises(UnitValueError, match="trailing backslash"):
        line_value("port 8080\\", "description")
    with pytest.raises(UnitValueError, match=r"llama_server_install_root=.*refuses an executable path"):
        exec_line(["/opt/o'brien/llama-server"], what="llama_server_install_root")
    with pytest.raises(UnitValueError, match="verbatim"):
        exec_line(["/bin/x", "%d/key file"], verbatim=["%d/key file"])


def test_escapes_are_exactly_systemds():
    assert exec_line(["/opt/a b $x %/llama-server", "50%", "$HOME", 'say "hi"', "back\\slash", ";", ""]) == (
        '"/opt/a b $x %%/llama-server" 50%% $$HOME "say \\"hi\\"" "back\\\\slash" ";" ""')
    assert exec_line(["/bin/x", "--api-key-file", "%d/key"], verbatim=["%d/key"]) == "/bin/x --api-key-file %d/key"
    assert env_assignment("A", 'x "%" $y') == '"A=x \\"%%\\" $y"'
    assert line_value("mödels 100%") == "mödels 100%%"


def test_cpu_quota_and_address_entries_are_checked() -> None:
    from specops.unitfile import UnitValueError, address_prefix, cpu_quota

    assert cpu_quota("50%") == "50%" and cpu_quota("250%") == "250%"
    assert address_prefix("10.0.0.0/24") == "10.0.0.0/24" and address_prefix("fd00::1") == "fd00::1"
    assert address_prefix("localhost") == "localhost"
    for bad, fn in (("50", cpu_quota), ("half", cpu_quota), ("10.0.0.0/33", address_prefix),
                    ("10.0.0.1 any", address_prefix), ("example.com", address_prefix)):
        with pytest.raises(UnitValueError):
            fn(bad)


@pytest.mark.parametrize(("rpc", "denied"), [(None, True), ("127.0.0.1:50052,localhost:50053", True),
                                             ("127.0.0.1:50052,gpu-box.lan:50052", False)])
def test_a_loopback_unit_keeps_its_rpc_devices_beyond_loopback_reachable(tmp_path, rpc, denied) -> None:
    """A service listening on loopback is denied every other address, which would cut it off from a ggml-rpc-server
    on another machine (llama_server_rpc with llama_server_rpc_remote): the deny list goes where an endpoint is
    remote (a host name cannot be allowed by address), and stays for loopback endpoints."""
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    ROLE_VARS["llama_server_rpc"] = rpc
    try:
        unit = render(tmp_path, tmp_path / "models", binary, tmp_path / "key", "a", "v", "d")
    finally:
        ROLE_VARS["llama_server_rpc"] = None
    text = unit.read_text()
    assert ("IPAddressDeny=any" in text) is denied and ("IPAddressAllow=localhost" in text) is denied
    assert complaints(unit) == []
