"""llama.cpp's RPC devices (issue 81): the knob ``rpc`` (llama-server's ``--rpc``), rendered from the table before the
device lists that may name its devices; its endpoints checked in the first play (host:port, each once, loopback unless
``llama_server_rpc_remote``, a builder with the RPC backend), one line each; the profile refuses a malformed one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specops.argv import build_argv, setting_in
from specops.capabilities import parse_help
from specops.deploycheck import check_inputs
from specops.knobs import GENERAL, argv_order, knob
from specops.profile import ProfileError, ServerProfile
from specops.rpc import RpcError, device_names, endpoints, rpc_problem

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llama_server"
SPECS = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
CAPS = parse_help((REPO / "tests/fixtures/llama-server-0c1e57098/llama-server_help.txt").read_text())
TWO = "127.0.0.1:50052,127.0.0.1:50053"
NO_AUTH = ("ggml-rpc-server has no authentication: anyone who can reach {ep} can run work on that device and read its "
           "memory")


def test_the_knob_is_llama_servers_rpc_declared_once_and_unset_by_default():
    k = knob("rpc")
    assert (k.flags, k.type, k.role_var, k.default, k.llama_default) == (("--rpc",), "str", "llama_server_rpc",
                                                                         None, None)
    assert k.doc == ("comma-separated host:port of ggml-rpc-server processes whose devices this server adds "
                     "(named RPC0, RPC1, ... in that order in --list-devices)")
    # generated into the role (specops knobs --update), unset there: no unit changes
    assert DEFAULTS["llama_server_rpc"] is None
    assert SPECS["llama_server_rpc"]["type"] == "str" and "ggml-rpc-server" in SPECS["llama_server_rpc"]["description"]


def test_rpc_is_written_before_the_device_lists_that_name_its_devices():
    """llama-server reads its arguments in order: --device RPC0 before --rpc is an "invalid device"."""
    general = [k.name for k in argv_order(GENERAL)]  # the general settings first, the speculation's after them
    assert general.index("rpc") < general.index("device") and "draft_device" not in general
    profile = ServerProfile.from_dict({
        "model": "/m/t.gguf", "draft_model": "/m/d.gguf", "rpc": TWO,
        "device": "RPC0", "draft_device": "RPC1"})
    argv = build_argv(profile, CAPS, binary="llama-server")
    i = argv.index("--rpc")
    assert argv[i + 1] == TWO
    assert i < argv.index("--device") < argv.index("--spec-draft-device")
    assert argv[argv.index("--device") + 1] == "RPC0"
    assert setting_in(argv, "rpc") == TWO  # read back from a command line by the same table
    assert "--rpc" not in build_argv(ServerProfile.from_dict({"model": "/m/t.gguf"}), CAPS)


def test_endpoints_and_the_device_names_llama_server_gives_them():
    found = endpoints(TWO)
    assert [(e.host, e.port, e.loopback) for e in found] == [("127.0.0.1", 50052, True), ("127.0.0.1", 50053, True)]
    assert device_names(TWO) == ("RPC0", "RPC1")  # as --list-devices names them at 0c1e57098
    assert endpoints(None) == endpoints("") == endpoints("  ") == ()
    assert endpoints("localhost:1")[0].loopback and endpoints("127.9.9.9:65535")[0].loopback
    assert not endpoints("10.0.0.5:50052")[0].loopback and not endpoints("gpu-box.lan:50052")[0].loopback
    with pytest.raises(RpcError, match="not host:port"):
        endpoints("127.0.0.1")


VAR = "llama_server_rpc"


@pytest.mark.parametrize("value,message", [
    ("127.0.0.1", f"{VAR}='127.0.0.1': '127.0.0.1' is not host:port with a port of 1-65535 (no blanks); list the "
                  "ggml-rpc-server endpoints comma-separated (e.g. 127.0.0.1:50052,127.0.0.1:50053)"),
    ("127.0.0.1:0", f"{VAR}='127.0.0.1:0': '127.0.0.1:0' is not host:port with a port of 1-65535"),
    ("127.0.0.1:65536", "'127.0.0.1:65536' is not host:port with a port of 1-65535"),
    ("127.0.0.1:-1", "'127.0.0.1:-1' is not host:port"),
    ("127.0.0.1:rpc", "'127.0.0.1:rpc' is not host:port"),
    (":50052", "':50052' is not host:port"),
    ("127.0.0.1:50052, 127.0.0.1:50053", "' 127.0.0.1:50053' is not host:port with a port of 1-65535 (no blanks)"),
    ("127.0.0.1:50052,", "an empty endpoint (a stray comma)"),
    ("[::1]:50052", "'[::1]:50052' is an IPv6 address, which llama.cpp's RPC client cannot reach"),
    ("::1:50052", "'::1:50052' is an IPv6 address"),
    ("127.0.0.1:50052,127.0.0.1:50052",
     f"{VAR}='127.0.0.1:50052,127.0.0.1:50052': 127.0.0.1:50052 is listed twice; name each ggml-rpc-server once"),
    ("localhost:50052,LOCALHOST:50052", "LOCALHOST:50052 is listed twice"),
    ("10.0.0.5:50052", f"{VAR}='10.0.0.5:50052': 10.0.0.5:50052 is beyond loopback, and "
                       + NO_AUTH.format(ep="10.0.0.5:50052")
                       + "; keep the servers on 127.0.0.1 (reach a remote one through an SSH tunnel), or set "
                       "llama_server_rpc_remote: true to accept that"),
    ("127.0.0.1:50052,gpu-box.lan:50052", "gpu-box.lan:50052 is beyond loopback, and "
                                          + NO_AUTH.format(ep="gpu-box.lan:50052")),
])
def test_each_bad_endpoint_list_is_one_line_in_the_first_play(value, message):
    problems = check_inputs({VAR: value, "llama_server_rpc_remote": False}, SPECS)
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert problems[0].startswith(f"{VAR}={value!r}: ") and message in problems[0], problems[0]


@pytest.mark.parametrize("values", [
    {VAR: TWO},
    {VAR: "localhost:50052"},
    {VAR: "127.0.0.2:50052"},
    {VAR: None},
    {VAR: ""},
    {VAR: "10.0.0.5:50052,gpu-box.lan:50053", "llama_server_rpc_remote": True},
    {VAR: "10.0.0.5:50052", "llama_server_rpc_remote": "true"},  # -e spells it as a string
    {VAR: TWO, "llama_cpp_rpc": True},
])
def test_loopback_or_remote_with_the_opt_in_passes(values):
    assert check_inputs(values, SPECS) == []


def test_the_opt_in_is_a_declared_role_setting_default_off():
    spec = SPECS["llama_server_rpc_remote"]
    assert spec["type"] == "bool" and spec["default"] is False and DEFAULTS["llama_server_rpc_remote"] is False
    assert "no authentication" in spec["description"]
    assert "llama_server_rpc_remote" in (ROLE / "README.md").read_text()
    problems = check_inputs({VAR: "10.0.0.5:50052", "llama_server_rpc_remote": "sure"}, SPECS)
    assert problems == ["llama_server_rpc_remote='sure': not a boolean; set true or false"]  # said once


def test_a_builder_without_the_rpc_backend_is_refused_in_one_line():
    problems = check_inputs({VAR: TWO, "llama_cpp_rpc": False}, SPECS)
    assert problems == [f"{VAR}={TWO!r}: the builder's llama.cpp has no RPC backend (llama_cpp_rpc is false), so "
                        "llama-server would stop with \"RPC not supported in this build\"; set llama_cpp_rpc: true "
                        f"for the llama_builders host (it also builds ggml-rpc-server), or unset {VAR}"]
    assert check_inputs({VAR: None, "llama_cpp_rpc": False}, SPECS) == []  # no --rpc, no backend needed


@pytest.mark.parametrize("builder,handed_in", [
    ({}, {"llama_cpp_rpc": False}),  # the role's default
    ({"llama_cpp_rpc": True}, {"llama_cpp_rpc": True}),
    ({"llama_cpp_rpc": "false"}, {"llama_cpp_rpc": False}),  # -e spells it as a string
    ({"llama_cpp_extra_cmake_options": {"GGML_RPC": "on"}}, {"llama_cpp_rpc": True}),
    (None, {}),  # no builder in the inventory: not known, not checked
])
def test_the_first_play_hands_in_whether_the_builder_builds_the_rpc_backend(builder, handed_in):
    """roles/llama_server/tasks/inputs.yml's _build_rpc, templated by Ansible, from the builder's settings."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    task = yaml.safe_load((ROLE / "tasks/inputs.yml").read_text())[0]
    assert "combine(_build_rpc) | specops_input_problems(_specs)" in task["vars"]["_problems"]
    variables = {"hostvars": {"b": builder or {}}, "groups": {"llama_builders": ["b"]} if builder is not None else {},
                 "_builder": task["vars"]["_builder"], "_build_rpc": task["vars"]["_build_rpc"]}
    assert Templar(loader=DataLoader(), variables=variables).template(task["vars"]["_build_rpc"]) == handed_in


def test_the_profile_refuses_a_malformed_endpoint_list_but_leaves_remote_to_the_role():
    with pytest.raises(ProfileError, match=r"rpc='127\.0\.0\.1': '127\.0\.0\.1' is not host:port"):
        ServerProfile.from_dict({"model": "/m/t.gguf", "rpc": "127.0.0.1"})
    with pytest.raises(ProfileError, match="listed twice"):
        ServerProfile.from_dict({"model": "/m/t.gguf", "rpc": "127.0.0.1:1,127.0.0.1:1"})
    assert ServerProfile.from_dict({"model": "/m/t.gguf", "rpc": "10.0.0.5:50052"}).rpc == "10.0.0.5:50052"
    assert rpc_problem("10.0.0.5:50052", var=lambda n: n) is not None  # the role's check refuses it by default


def test_remote_hosts_are_the_endpoints_beyond_loopback():
    from specops.rpc import remote_hosts

    assert remote_hosts(None) == remote_hosts("") == remote_hosts(TWO) == []
    assert remote_hosts("127.0.0.1:1,gpu-box.lan:2,10.0.0.5:3") == ["gpu-box.lan", "10.0.0.5"]
    assert remote_hosts("not an endpoint") == []  # refused in the first play, never rendered
