"""specops.deploycheck (one line per bad input, against the role's argument specs) and the memory fit receiving
the profile that is deployed (roles/models fit.yml, fed by roles/llama_server preflight)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops.deploycheck import check_host, check_inputs
from specops.probe import summarize_probe
from tests.unit.hostcode import argv

REPO = Path(__file__).resolve().parents[2]
SPECS = yaml.safe_load((REPO / "roles/llama_server/meta/argument_specs.yml").read_text())["argument_specs"]["main"][
    "options"]
DEFAULTS = yaml.safe_load((REPO / "roles/llama_server/defaults/main.yml").read_text())


def test_every_default_has_a_spec_and_passes_it():
    assert set(DEFAULTS) == set(SPECS), set(DEFAULTS) ^ set(SPECS)
    plain = {k: v for k, v in DEFAULTS.items() if not (isinstance(v, str) and "{{" in v)}
    assert check_inputs(plain, SPECS) == []


@pytest.mark.parametrize("name,value,fragment", [
    ("llama_server_parallel", "0", "must be at least 1"),
    ("llama_server_parallel", 0, "must be at least 1"),
    ("llama_server_draft_n_max", -1, "must be at least 0"),
    ("llama_server_ctx_size", "lots", "not a whole number"),
    ("llama_server_draft_p_min", "high", "not a number"),
    ("llama_server_draft_p_min", 1.5, "at most 1"),
    ("llama_server_port", 70000, "at most 65535"),
    ("llama_server_spec_type", "draft-magic", "not one of auto, none"),
    ("llama_server_cache_type_v", "q9", "not one of f32"),
    ("llama_server_speed_gate", False, "quote it"),
    ("llama_server_baseline_enabled", "maybe", "not a boolean"),
    ("llama_server_extra_args", "--foo", "not a list"),
    ("llama_server_models_dir", "models", "not an absolute path"),
    ("llama_server_install_root", "/opt/o'brien", "refuses an executable path"),
    ("llama_server_api_key_file", "keys/api", "not an absolute path"),
    ("llama_server_service_name", "llama server", "not a systemd unit name"),
    ("llama_server_alias", "a\nb", "a newline"),
])
def test_bad_setting_is_one_line_naming_variable_and_value(name, value, fragment):
    problems = check_inputs({name: value}, SPECS)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{name}={value!r}") and fragment in problems[0] and "\n" not in problems[0]


def test_good_settings_pass():
    good = {"llama_server_parallel": "2", "llama_server_draft_n_max": 0, "llama_server_spec_type": "ngram-mod",
            "llama_server_cache_type_k": None, "llama_server_api_key_file": "", "llama_server_flash_attn": "auto",
            "llama_server_models_dir": "/srv/spec ops/mödels %/", "llama_server_environment": {"A_B": "x y"}}
    assert check_inputs(good, SPECS) == []


def test_a_refused_directory_is_not_reported_again_for_the_models_in_it():
    problems = check_inputs({"specops_models_dir": "srv", "llama_server_models_dir": "srv",
                             "llama_server_target_model": "srv/t.gguf"}, SPECS)
    assert len(problems) == 1 and problems[0].startswith("specops_models_dir=")


def test_same_port_twice_is_refused():
    assert any("the same as llama_server_port" in p for p in
               check_inputs({"llama_server_port": 8080, "llama_server_baseline_port": "8080"}, SPECS))


KEY = "/etc/specops/api-key"
OURS = ["llama-server-speculative.service", "llama-server-baseline.service"]


@pytest.mark.parametrize("facts,fragment", [
    ({"exists": False}, f"no such file on h1; create it there (one key per line), then run: chown root:root {KEY}"),
    ({"exists": True, "mode": stat.S_IFDIR | 0o755, "uid": 0, "gid": 0}, "a directory on h1"),
    ({"exists": True, "mode": stat.S_IFREG | 0o644, "uid": 0, "gid": 0, "size": 9}, f"run: chmod 0600 {KEY}"),
    ({"exists": True, "mode": stat.S_IFREG | 0o600, "uid": 1000, "gid": 0, "size": 9}, f"run: chown root:root {KEY}"),
    ({"exists": True, "mode": stat.S_IFREG | 0o600, "uid": 0, "gid": 0, "size": 0}, "empty on h1"),
])
def test_api_key_file_problems(facts, fragment):
    problems = check_host({"key_file": facts, "ports": {}}, "h1", KEY, {}, OURS)
    assert len(problems) == 1 and fragment in problems[0]
    assert problems[0].startswith(f"llama_server_api_key_file='{KEY}'")


def test_root_only_key_file_and_our_own_ports_pass():
    facts = {"key_file": {"exists": True, "mode": stat.S_IFREG | 0o600, "uid": 0, "gid": 0, "size": 9},
             "ports": {"8080": {"pid": 7, "comm": "llama-server", "unit": OURS[0]}, "8081": None}}
    assert check_host(facts, "h1", KEY, {"llama_server_port": 8080, "llama_server_baseline_port": 8081}, OURS) == []


def test_port_taken_by_another_process_names_it():
    facts = {"key_file": None, "ports": {"8080": {"pid": 42, "comm": "nginx", "unit": "nginx.service"}}}
    problems = check_host(facts, "h1", "", {"llama_server_port": 8080}, OURS)
    assert problems == ["llama_server_port=8080: port 8080 is already taken on h1 by nginx (pid 42, nginx.service); "
                        "pick a free port or stop that process"]


def test_the_fit_receives_the_deployed_profile(tmp_path):
    """roles/models fit.yml hands the composed service profile whole to `specops fit --profile -` (draft length,
    cache types, slots, prompt cache, flash attention; a null stays null: llama-server's own default), and the
    fit's parameters are what that profile deploys."""
    record = tmp_path / "argv.json"
    cli = tmp_path / "fake-specops"
    cli.write_text(f"#!{sys.executable}\nimport json,sys\n"
                   f"json.dump([sys.argv[1:], sys.stdin.read()], open({str(record)!r}, 'w'))\n"
                   "print(json.dumps({'fits': True}))\n")
    cli.chmod(0o755)
    profile = {"ctx_size": 2048, "parallel": 2, "draft_n_max": 4, "cache_type_k": None, "cache_type_v": "q8_0",
               "draft_cache_type_k": "q8_0", "draft_cache_type_v": None, "flash_attn": "on", "cache_ram_mib": 1024,
               "draft_model": "/srv/d.gguf", "backend": "cpu"}
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [
        {"ansible.builtin.include_role": {"name": "models", "tasks_from": "fit"},
         "vars": {"specops_fit_profile": profile, "specops_models_cli": str(cli), "specops_fit_memory_mib": 9999,
                  "specops_models_target": "t", "specops_models_draft": "d",
                  "specops_models_controller_paths": {"t": "/c/t.gguf", "d": "/c/d.gguf"}}}]}]
    book = tmp_path / "fit.yml"
    book.write_text(yaml.safe_dump(play))
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", str(book),
                           "-e", f"ansible_python_interpreter={sys.executable}"], capture_output=True, text=True,
                          cwd=REPO, check=False, env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    assert proc.returncode == 0, proc.stdout[-3000:]
    argv, stdin = json.loads(record.read_text())
    pairs = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert argv[:4] == ["fit", "--json", "/c/t.gguf", "/c/d.gguf"], argv
    assert pairs["--profile"] == "-" and pairs["--backend"] == "cpu"
    sent = json.loads(stdin)
    assert "backend" not in sent and {k: sent[k] for k in profile if k != "backend"} == {
        k: v for k, v in profile.items() if k != "backend"}
    # ... and `specops fit` reads it as deployed: a null is llama-server's own default
    from specops.cli import build_parser
    from specops.commands.fit import _profile, fit_params
    (tmp_path / "p.json").write_text(stdin)
    params = fit_params(build_parser().parse_args(["fit", "t.gguf"]), _profile(tmp_path / "p.json"))
    assert (params.draft_n_max, params.parallel, params.ctx_size, params.cache_ram_mib) == (4, 2, 2048, 1024)
    assert (params.cache_type_k, params.cache_type_v, params.draft_cache_type_k, params.draft_cache_type_v) == (
        "f16", "q8_0", "q8_0", "f16")
    assert params.flash_attn is True


def test_a_deploy_without_the_builder_inventory_says_which_inventory_to_add(tmp_path):
    """Issue 31: `-i` with only the servers used to end in "'dict object' has no attribute 'llama_builders'" after
    10 s; the first task of the first play now refuses in one line that names the -i to add, before anything."""
    inv = tmp_path / "servers.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"llama_servers": {"hosts": {"srv": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv), "deploy.yml"],
                          capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
                          env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "no llama_builders group" in out and "-i inventory/builder.yml" in out, out[-2000:]
    assert "has no attribute" not in out
    assert "Check every input against the argument specs" not in out  # refused before the input checks ran


# ---- listen address beyond loopback without a key; ports below 1024 -------------------------------------------
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "fd00::5", "myhost.lan"])
def test_public_listen_address_without_a_key_is_refused(host):
    problems = check_inputs({"llama_server_host": host, "llama_server_api_key_file": ""}, SPECS)
    assert problems == [f"llama_server_host={host!r}: listens beyond loopback and no llama_server_api_key_file is set, "
                        "so anyone who reaches the port can use the model; set llama_server_api_key_file (a root-only "
                        "file, one key per line), listen on 127.0.0.1 behind a proxy, or set "
                        "llama_server_allow_public_unauthenticated: true to accept that"]


@pytest.mark.parametrize("values", [
    {"llama_server_host": "127.0.0.1"}, {"llama_server_host": "localhost"}, {"llama_server_host": "::1"},
    {"llama_server_host": "127.0.0.2"},
    {"llama_server_host": "0.0.0.0", "llama_server_api_key_file": "/etc/specops/api-key"},
    {"llama_server_host": "0.0.0.0", "llama_server_allow_public_unauthenticated": True},
    {"llama_server_host": "::", "llama_server_allow_public_unauthenticated": "true"},   # -e spells it as a string
])
def test_loopback_a_key_or_the_explicit_opt_in_pass(values):
    assert check_inputs({"llama_server_api_key_file": "", **values}, SPECS) == []


def test_a_bad_opt_in_value_is_reported_as_such():
    problems = check_inputs({"llama_server_host": "0.0.0.0", "llama_server_allow_public_unauthenticated": "sure"},
                            SPECS)
    assert any(p.startswith("llama_server_allow_public_unauthenticated='sure': not a boolean") for p in problems)


@pytest.mark.parametrize("name,port", [("llama_server_port", 80), ("llama_server_port", "443"),
                                       ("llama_server_baseline_port", 1023)])
def test_privileged_port_without_the_capability_is_refused(name, port):
    problems = check_inputs({name: port}, SPECS)
    example = 8080 if name == "llama_server_port" else 8081
    assert problems == [f"{name}={port!r}: below 1024, and the service user (systemd DynamicUser) has no "
                        f"capability to bind it (llama-server would fail with permission denied); pick a port of "
                        f"1024 or more (e.g. {example}) or set llama_server_bind_privileged_port: true (grants the "
                        "unit CAP_NET_BIND_SERVICE)"]


def test_privileged_port_with_the_capability_passes_and_bad_ports_are_reported_once():
    assert check_inputs({"llama_server_port": 80, "llama_server_bind_privileged_port": True}, SPECS) == []
    assert check_inputs({"llama_server_port": 1024}, SPECS) == []
    assert len(check_inputs({"llama_server_port": 0}, SPECS)) == 1     # the range says it, not the 1024 rule
    assert len(check_inputs({"llama_server_port": "http"}, SPECS)) == 1


def test_the_new_settings_are_declared_and_default_off():
    for name in ("llama_server_allow_public_unauthenticated", "llama_server_bind_privileged_port"):
        assert SPECS[name]["type"] == "bool" and SPECS[name]["default"] is False and SPECS[name]["description"]
        assert DEFAULTS[name] is False


# ---- the API key file's lines, as llama-server reads them (never the key) ------------------------------------
def _key(content: dict) -> dict:
    return {"key_file": {"exists": True, "mode": stat.S_IFREG | 0o600, "uid": 0, "gid": 0, "size": 9,
                         "content": content}, "ports": {}}


CLEAN = {"lines": 1, "keys": 1, "empty": False, "cr": False, "edge_whitespace": False, "nonprintable": False}


@pytest.mark.parametrize("flag,message", [
    ({"empty": True, "keys": 0}, f"llama_server_api_key_file='{KEY}': empty on h1 (no key line: llama-server skips "
     "empty lines and lines starting with #, and with no key it serves without authentication); write the key into "
     "it (one per line)"),
    ({"cr": True}, f"llama_server_api_key_file='{KEY}': has CR characters (Windows line endings) on h1; llama-server "
     "splits at LF only and would keep the CR in the key, which no client sends; "
     f"run: sed -i 's/\\r//g' {KEY}"),
    ({"edge_whitespace": True}, f"llama_server_api_key_file='{KEY}': a key line starts or ends with a space or tab "
     "on h1; llama-server keeps it in the key (it strips nothing) and HTTP drops it from the Authorization header, "
     f"so no client can send that key; remove the spaces: sed -i 's/^[[:blank:]]*//; s/[[:blank:]]*$//' {KEY}"),
    ({"nonprintable": True}, f"llama_server_api_key_file='{KEY}': a key line holds a byte that is not printable "
     "ASCII (a control character, a tab, a byte-order mark or non-ASCII text) on h1; write each key in printable "
     "ASCII, one per line with LF line endings"),
])
def test_key_file_lines_are_refused_in_one_line(flag, message):
    assert check_host(_key({**CLEAN, **flag}), "h1", KEY, {}, OURS) == [message]
    assert check_host(_key(CLEAN), "h1", KEY, {}, OURS) == []


def _host_facts():
    from specops.host import host_facts

    return host_facts


@pytest.mark.parametrize("data,expected", [
    (b"secret\n", {}),
    (b"secret", {}),                                            # no final LF: getline still yields it
    (b"# keys\n\nsecret\nsecond\n", {"keys": 2, "lines": 4}),
    (b"", {"empty": True, "keys": 0, "lines": 0}),
    (b"# only a comment\n\n", {"empty": True, "keys": 0, "lines": 2}),   # llama-server: no key, no auth
    (b"secret\r\n", {"cr": True}),
    (b"# c\r\nsecret\n", {"cr": True, "lines": 2}),
    (b"secret \n", {"edge_whitespace": True}),
    (b"\tsecret\n", {"edge_whitespace": True}),
    (b" #secret\n", {"edge_whitespace": True}),                 # not a comment to llama-server: a key
    (b"sec\x01ret\n", {"nonprintable": True}),
    (b"\xef\xbb\xbfsecret\n", {"nonprintable": True}),          # a byte-order mark ends up in the key
    (b"# cl\xc3\xa9 of the lab\nsecret\n", {"lines": 2}),       # a comment may hold anything
])
def test_key_lines_classify_like_llama_server(data, expected):
    facts = _host_facts().key_lines(data)
    assert facts == {**CLEAN, **expected}
    assert b"secret" not in json.dumps(facts).encode()


def test_host_facts_reports_the_key_files_shape_never_the_key(tmp_path):
    key = tmp_path / "api-key"
    key.write_bytes(b"sk-abc123\r\n")
    key.chmod(0o600)
    out = subprocess.run(argv("host_facts", "--key-file", str(key)), capture_output=True, text=True,
                         check=True).stdout
    assert "sk-abc123" not in out
    facts = json.loads(out)
    assert facts["key_file"]["content"]["cr"] is True and facts["paths"] == {}
    problems = check_host(facts, "h1", str(key), {}, OURS)
    assert [p for p in problems if "CR characters" in p and "sk-abc" not in p]


# ---- can the service user (DynamicUser, ProtectHome=yes) read the models? ----------------------------------------
@pytest.mark.parametrize("facts,message", [
    ({"path": "/srv/models/t.gguf", "real": "/root/private/t.gguf", "exists": True,
      "blocked": {"at": "/root", "reason": "protect-home"}},
     "llama_server_target_model='/srv/models/t.gguf': resolves to /root/private/t.gguf, under /root, which the "
     "service cannot see on h1 (ProtectHome=yes hides /home, /root and /run/user from it); move the model to a "
     "world-readable directory outside /home, /root, /run/user, /tmp and /var/tmp (e.g. /srv)"),
    ({"path": "/home/ann/t.gguf", "real": "/home/ann/t.gguf", "exists": True,
      "blocked": {"at": "/home", "reason": "protect-home"}},
     "llama_server_target_model='/home/ann/t.gguf': is under /home, which the service cannot see on h1 "
     "(ProtectHome=yes hides /home, /root and /run/user from it); move the model to a world-readable directory "
     "outside /home, /root, /run/user, /tmp and /var/tmp (e.g. /srv)"),
    ({"path": "/var/tmp/t.gguf", "real": "/var/tmp/t.gguf", "exists": True,
      "blocked": {"at": "/var/tmp", "reason": "private-tmp"}},
     "llama_server_target_model='/var/tmp/t.gguf': is under /var/tmp, which the service cannot see on h1 "
     "(PrivateTmp=yes gives it an empty /tmp and /var/tmp of its own); move the model to a world-readable "
     "directory outside /home, /root, /run/user, /tmp and /var/tmp (e.g. /srv)"),
    ({"path": "/srv/models/t.gguf", "real": "/data/private/t.gguf", "exists": True,
      "blocked": {"at": "/data/private", "reason": "mode", "mode": 0o700, "owner": "root", "class": "other",
                  "need": "x"}},
     "llama_server_target_model='/srv/models/t.gguf': resolves to /data/private/t.gguf, and /data/private "
     "(mode 0700, owner root) does not let the service user (systemd DynamicUser) through on h1; move the model "
     "under a world-readable directory or run: chmod o+x /data/private"),
    ({"path": "/srv/models/t.gguf", "real": "/srv/models/t.gguf", "exists": True,
      "blocked": {"at": "/srv/models/t.gguf", "reason": "mode", "mode": 0o600, "owner": "ann", "class": "other",
                  "need": "r"}},
     "llama_server_target_model='/srv/models/t.gguf': /srv/models/t.gguf (mode 0600, owner ann) is not readable "
     "by the service user (systemd DynamicUser) on h1; run: chmod o+r /srv/models/t.gguf"),
    ({"path": "/srv/models/t.gguf", "real": "/srv/models/t.gguf", "exists": True,
      "blocked": {"at": "/srv/models", "reason": "mode", "mode": 0o705, "owner": "root", "class": "group",
                  "need": "x"}},
     "llama_server_target_model='/srv/models/t.gguf': /srv/models (mode 0705, owner root) does not let the service "
     "user (systemd DynamicUser) through on h1; move the model under a world-readable directory or run: "
     "chmod g+x /srv/models"),
    ({"path": "/opt/m/t.gguf", "real": "/opt/m/t.gguf", "exists": False,
      "blocked": {"at": "/opt", "reason": "mode", "mode": 0o700, "owner": "root", "class": "other", "need": "x"}},
     "llama_server_target_model='/opt/m/t.gguf': /opt (mode 0700, owner root) would not let the service user "
     "(systemd DynamicUser) through to the model, which is not there yet, on h1; put the model under a "
     "world-readable directory or run: chmod o+x /opt"),
    ({"path": "/srv/models", "real": "/srv/models", "exists": True,
      "blocked": {"at": "/srv/models", "reason": "directory"}},
     "llama_server_target_model='/srv/models': /srv/models is a directory on h1; point it at the model file (.gguf) "
     "itself"),
    ({"path": "/srv/loop.gguf", "error": "too many levels of symbolic links at /srv/loop.gguf"},
     "llama_server_target_model='/srv/loop.gguf': cannot be resolved on h1 (too many levels of symbolic links at "
     "/srv/loop.gguf); fix the path or its symlinks"),
])
def test_a_model_the_service_cannot_read_is_one_line(facts, message):
    assert check_host({"paths": {"llama_server_target_model": facts}}, "h1", "", {}, OURS) == [message]


def test_readable_models_and_no_draft_pass():
    ok = {"path": "/srv/specops/models/t.gguf", "real": "/srv/specops/models/t.gguf", "exists": True, "blocked": None}
    fresh = {"path": "/srv/specops/models/d.gguf", "real": "/srv/specops/models/d.gguf", "exists": False,
             "blocked": None}
    facts = {"paths": {"llama_server_target_model": ok, "llama_server_draft_model": fresh}}
    assert check_host(facts, "h1", "", {}, OURS) == []


# host_facts.path_access against real files: computed from the mode bits, so it holds when the tests run as root
@pytest.fixture
def tree():
    """A world-traversable directory (pytest's own tmp_path sits in a 0700 directory, which would block the walk),
    with models/t.gguf readable by all."""
    import shutil
    import tempfile
    root = Path(tempfile.mkdtemp(prefix="specops-host-facts-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    root.chmod(0o755)
    models = root / "models"
    models.mkdir()
    models.chmod(0o755)
    model = models / "t.gguf"
    model.write_bytes(b"GGUF")
    model.chmod(0o644)
    if any(not (p.stat().st_mode & 1) for p in root.parents):
        pytest.skip(f"a directory above {root} is not traversable by others on this machine")
    yield root
    for path in root.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(root)


def _visible():
    """A copy of host_facts of its own with /tmp and /var/tmp visible: the test tree lives there (PrivateTmp= is
    checked on its own, with the package's module)."""
    import importlib.util

    spec = importlib.util.find_spec("specops.host.host_facts")
    assert spec and spec.loader
    hf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf)
    hf.HIDDEN = {k: v for k, v in hf.HIDDEN.items() if k not in ("/tmp", "/var/tmp")}
    return hf


def _access(path, gids=()):
    return _visible().path_access(str(path), set(gids))


def test_a_world_readable_model_passes(tree):
    facts = _access(tree / "models" / "t.gguf")
    assert facts["blocked"] is None and facts["exists"] and facts["real"] == str(tree / "models" / "t.gguf")


def test_a_closed_directory_behind_a_symlink_is_named_with_its_mode(tree):
    private = tree / "private"
    private.mkdir()
    (private / "t.gguf").write_bytes(b"GGUF")
    (private / "t.gguf").chmod(0o644)
    private.chmod(0o700)
    link = tree / "models" / "link.gguf"
    link.symlink_to(private / "t.gguf")
    try:
        facts = _access(link)
    finally:
        private.chmod(0o755)
    assert facts["real"] == str(private / "t.gguf")
    assert facts["blocked"]["at"] == str(private) and facts["blocked"]["mode"] == 0o700
    assert facts["blocked"]["class"] == "other" and facts["blocked"]["need"] == "x"
    line = check_host({"paths": {"llama_server_target_model": facts}}, "h1", "", {}, OURS)[0]
    assert f"resolves to {private}/t.gguf, and {private} (mode 0700" in line and f"chmod o+x {private}" in line


def test_an_unreadable_file_and_the_group_rule(tree):
    model = tree / "models" / "t.gguf"
    model.chmod(0o640)
    facts = _access(model)
    assert facts["blocked"]["at"] == str(model) and facts["blocked"]["need"] == "r"
    # group bits count when the file's group is one of the unit's SupplementaryGroups ...
    assert _access(model, {model.stat().st_gid})["blocked"] is None
    # ... and then only they do, as in the kernel: group 0 with others' r is still no read
    model.chmod(0o604)
    assert _access(model, {model.stat().st_gid})["blocked"]["class"] == "group"
    assert _access(model)["blocked"] is None


def test_a_model_not_there_yet_checks_the_nearest_existing_directory(tree):
    assert _access(tree / "models" / "new" / "deeper" / "d.gguf")["blocked"] is None
    closed = tree / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    facts = _access(closed / "sub" / "d.gguf")
    assert facts["exists"] is False and facts["blocked"]["at"] == str(closed)


def test_a_directory_and_a_symlink_loop_are_reported(tree):
    assert _access(tree / "models")["blocked"]["reason"] == "directory"
    loop = tree / "models" / "loop.gguf"
    loop.symlink_to(loop)
    assert "symbolic links" in _access(loop)["error"]


def test_protect_home_and_private_tmp_hide_whatever_resolves_there(tree):
    link = tree / "models" / "home.gguf"
    link.symlink_to("/root/private/t.gguf")
    facts = _access(link)
    assert facts["real"] == "/root/private/t.gguf" and facts["blocked"] == {"at": "/root", "reason": "protect-home"}
    hf = _host_facts()
    assert hf.path_access("/home/someone/t.gguf", set())["blocked"] == {"at": "/home", "reason": "protect-home"}
    assert hf.path_access("/run/user/1000/t.gguf", set())["blocked"]["reason"] == "protect-home"
    assert hf.path_access("/tmp/t.gguf", set())["blocked"] == {"at": "/tmp", "reason": "private-tmp"}
    assert hf.path_access(str(tree / "models" / "t.gguf"), set())["blocked"]["reason"] == "private-tmp"
    assert hf._hidden("/homework/t.gguf") == "" and hf._hidden("/root") == "protect-home"


def test_host_facts_takes_model_paths_and_groups(tree):
    model = tree / "models" / "t.gguf"
    out = subprocess.run(argv("host_facts", "--path", f"llama_server_target_model={model}",
                              "--path", "llama_server_draft_model=", "--group", "no-such-group-here"),
                         capture_output=True, text=True, check=True).stdout
    paths = json.loads(out)["paths"]
    assert list(paths) == ["llama_server_target_model"] and paths["llama_server_target_model"]["path"] == str(model)


# ---- the probes read the key as llama-server does, and a 401 is one JSON line --------------------------------------
@pytest.mark.parametrize("script", ["drain", "probe", "speed_probe"])
def test_the_probes_read_the_key_as_llama_server_does(tmp_path, script):
    """Each sends the header of hostlib.auth_headers (specops.keyfile, llama-server's rule), none a reader of its
    own."""
    import importlib

    module = importlib.import_module(f"specops.host.{script}")
    headers = module.auth_headers if hasattr(module, "auth_headers") else module.hostlib.auth_headers
    assert headers.__module__ == "specops.host.hostlib" and not hasattr(module, "read_key")
    key = tmp_path / "key"
    for data, first in [(b"# comment\n\nk-1\nk-2\n", "k-1"), (b"k-1", "k-1"), (b" k-1 \n", " k-1 "),
                        (b"k-1\r\n", "k-1\r"), (b"# only\n", "")]:
        key.write_bytes(data)
        assert headers(str(key)) == {"Authorization": f"Bearer {first}"}, data
    assert headers(None) == {} and headers("") == {}


def test_probe_answers_a_401_with_one_json_line_naming_the_key_file(tmp_path):
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key = tmp_path / "api-key"
    key.write_text("sk-wrong-one\n")
    try:
        proc = subprocess.run(argv("probe", "--url", f"http://127.0.0.1:{server.server_port}", "--prompt", "x",
                                   "--api-key-file", str(key)),
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.shutdown()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and "sk-wrong" not in proc.stdout + proc.stderr
    error = json.loads(lines[0])["error"]
    assert "HTTP 401" in error and str(key) in error and "llama_server_api_key_file" in error


def test_an_unchanged_unit_whose_process_was_proven_is_not_probed_again(tmp_path, monkeypatch):
    """Issue 63 item 2: a no-op re-deploy spent 20 s of its 80 on a probe completion of a unit that had not changed,
    whose very process had been proven before. The same PID started at the same moment: its earlier proof stands
    ('earlier', its counters then to now); another start of the unit, or no earlier proof, sends the probe."""
    import http.server
    import threading

    from specops.host import probe
    completions = []

    class Stand(http.server.BaseHTTPRequestHandler):
        def _send(self, body: bytes):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/metrics":
                n = 10 * len(completions)
                self._send(f"llamacpp:spec_decode_num_draft_tokens_total {n}\n".encode())
            else:
                self._send(json.dumps([{"id": 0, "is_processing": False, "speculative": True}]).encode())

        def do_POST(self):
            completions.append(self.rfile.read(int(self.headers["Content-Length"])))
            self._send(json.dumps({"content": "x", "timings": {"predicted_per_second": 9.5}}).encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Stand)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    process = ["4242", "1000"]
    monkeypatch.setattr(probe, "main_process", lambda unit: (int(process[0]), process[1]))
    state = tmp_path / "proof.json"

    def run(busy_deadline: float) -> dict:
        args = argparse.Namespace(url=f"http://127.0.0.1:{server.server_port}", prompt="p", tokens=4,
                                  api_key_file=None, unit="u.service", state=str(state), busy_deadline=busy_deadline)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert probe.prove(args, {}) == 0
        return json.loads(out.getvalue())

    try:
        first = run(0.0)  # a changed unit: the probe completion
        assert first["source"] == "probe" and len(completions) == 1
        again = run(5.0)  # unchanged, the same process: its earlier proof, no completion
        assert again["source"] == "earlier" and len(completions) == 1 and "pid 4242" in again["since"]
        assert again["metrics_before"] == first["metrics_before"] and again["timings"] == first["timings"]
        summary = summarize_probe(again)
        assert summary["draft_tokens_delta"] == 10 and summary["predicted_per_second"] == 9.5
        assert run(5.0)["since"] == again["since"]  # still the first proof's moment, not re-dated
        process[1] = "2000"  # the unit started again (the same PID reused): probed again
        assert run(5.0)["source"] == "probe" and len(completions) == 2
        drafted_now = f"llamacpp:spec_decode_num_draft_tokens_total {10 * len(completions)}\n"
        state.write_text(json.dumps({"pid": 4242, "started": "2000", "metrics": drafted_now}))  # written before
        assert run(5.0)["source"] == "probe" and len(completions) == 3
    finally:
        server.shutdown()
