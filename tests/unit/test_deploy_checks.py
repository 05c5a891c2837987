"""specops.deploycheck (one line per bad input, against the role's argument specs) and the memory fit receiving
the profile that is deployed (roles/models fit.yml, fed by roles/llama_server preflight)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops.deploycheck import check_host, check_inputs

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
