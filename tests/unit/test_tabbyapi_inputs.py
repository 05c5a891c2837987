"""roles/tabbyapi's inputs (issue 28): every default typed and described in meta/argument_specs.yml, the README's
settings table generated from them, and each bad input refused in one line naming the variable
(specops.deploycheck.check_tabbyapi_inputs / check_tabbyapi_host, what the deploy's first play runs)."""

from __future__ import annotations

import stat

import pytest
import yaml

from specops.commands.role_settings import BEGIN, END, markdown_table
from specops.deploycheck import check_tabbyapi_host, check_tabbyapi_inputs
from tests.unit.test_unit_quoting import REPO

ROLE = REPO / "roles" / "tabbyapi"
SPECS = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
GOOD = {**DEFAULTS, "tabbyapi_models_dir": "/srv/specops/models",
        "tabbyapi_target_model": "/srv/specops/models/Midnight-Miqu-70B-v1.5-exl2-2.5bpw"}


def test_every_default_is_typed_and_described():
    assert set(DEFAULTS) == set(SPECS)
    for name, spec in SPECS.items():
        assert spec.get("type"), name
        assert spec.get("description"), name


def test_readme_settings_table_is_the_generated_one():
    text = (ROLE / "README.md").read_text()
    assert BEGIN in text and END in text
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert section.strip() == markdown_table(ROLE).strip(), (
        "roles/tabbyapi/README.md is out of date: run `specops role-settings roles/tabbyapi --update "
        "roles/tabbyapi/README.md`")


def test_the_defaults_pass():
    assert check_tabbyapi_inputs(GOOD, SPECS) == []


BAD = {
    "port out of range": ({"tabbyapi_port": 70000}, "tabbyapi_port", "must be at most 65535"),
    "privileged port": ({"tabbyapi_port": 443}, "tabbyapi_port", "pick a port of 1024 or more"),
    "port not a number": ({"tabbyapi_port": "http"}, "tabbyapi_port", "not a whole number"),
    "ctx 0": ({"tabbyapi_ctx_size": 0}, "tabbyapi_ctx_size", "must be at least 1"),
    "parallel 0": ({"tabbyapi_parallel": 0}, "tabbyapi_parallel", "must be at least 1"),
    "draft length 0": ({"tabbyapi_draft_n_max": 0}, "tabbyapi_draft_n_max", "must be at least 1"),
    "unknown backend": ({"tabbyapi_backend": "exllamav4"}, "tabbyapi_backend", "not one of exllamav2, exllamav3"),
    "unknown spec type": ({"tabbyapi_spec_type": "eagle"}, "tabbyapi_spec_type", "not one of"),
    "unknown draft cache": ({"tabbyapi_draft_cache_mode": "Q5"}, "tabbyapi_draft_cache_mode", "not one of"),
    "split not numbers": ({"tabbyapi_gpu_split": ["a lot"]}, "tabbyapi_gpu_split", "every element must be a number"),
    "split not a list": ({"tabbyapi_gpu_split": "20,24"}, "tabbyapi_gpu_split", "not a list"),
    "tensor parallel maybe": ({"tabbyapi_tensor_parallel": "maybe"}, "tabbyapi_tensor_parallel", "not a boolean"),
    "relative models dir": ({"tabbyapi_models_dir": "srv/models"}, "tabbyapi_models_dir", "not an absolute path"),
    "newline in target": ({"tabbyapi_target_model": "/srv/m\nx"}, "tabbyapi_target_model", "contains a newline"),
    "dot-dot in draft": ({"tabbyapi_draft_model": "/srv/../d"}, "tabbyapi_draft_model", ". or .."),
    "quote in install dir": ({"tabbyapi_install_dir": "/opt/o'brien"}, "tabbyapi_install_dir",
                             "refuses an executable path"),
    "relative tokens file": ({"tabbyapi_api_tokens_file": "api_tokens.yml"}, "tabbyapi_api_tokens_file",
                             "not an absolute path"),
    "state dir outside /var/lib": ({"tabbyapi_state_dir": "/srv/tabby"}, "tabbyapi_state_dir",
                                   "directly under /var/lib"),
    "state dir with a space": ({"tabbyapi_state_dir": "/var/lib/tabby api"}, "tabbyapi_state_dir", "may hold only"),
    "bad memory max": ({"tabbyapi_memory_max": "lots"}, "tabbyapi_memory_max", "not a size systemd reads"),
    "bad unit name": ({"tabbyapi_service_name": "tabby api"}, "tabbyapi_service_name", "not a systemd unit name"),
    "bad environment name": ({"tabbyapi_environment": {"1X": "y"}}, "tabbyapi_environment",
                             "not an environment variable name"),
    "draft with spec type none": ({"tabbyapi_draft_model": "/srv/specops/models/d", "tabbyapi_spec_type": "none"},
                                  "tabbyapi_draft_model", "does not use a draft"),
    "draft-simple without a draft": ({"tabbyapi_spec_type": "draft-simple"}, "tabbyapi_spec_type",
                                     "needs tabbyapi_draft_model"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_refused_in_one_line(name):
    overrides, variable, fragment = BAD[name]
    problems = check_tabbyapi_inputs({**GOOD, **overrides}, SPECS)
    assert len(problems) == 1, problems
    assert problems[0].startswith(variable) and fragment in problems[0] and "\n" not in problems[0], problems


def _key(mode=0o100600, uid=0, gid=0, api=True, admin=True):
    return {"exists": True, "mode": mode, "uid": uid, "gid": gid, "size": 40,
            "tokens": {"api_key": api, "admin_key": admin}}


def _dir_facts(exists=True, files=("config.json", "tokenizer.json"), var="tabbyapi_target_model", path="/srv/m/t"):
    facts = {f"{var}/": {"path": path, "real": path, "exists": exists, "blocked": {"at": path, "reason": "directory"}}}
    for name in ("config.json", "tokenizer.json"):
        facts[f"{var}/{name}"] = {"path": f"{path}/{name}", "real": f"{path}/{name}", "exists": name in files,
                                  "blocked": None}
    return facts


HOST = {
    "tokens file missing": ({"tokens_file": {"exists": False}}, "no such file on lab"),
    "tokens file a directory": ({"tokens_file": {**_key(), "mode": stat.S_IFDIR | 0o700}}, "a directory on lab"),
    "tokens file 0644": ({"tokens_file": _key(mode=0o100644)}, "run: chmod 0600 /etc/tabbyapi/api_tokens.yml"),
    "tokens file not root's": ({"tokens_file": _key(uid=1000)}, "run: chown root:root /etc/tabbyapi/api_tokens.yml"),
    "no admin key": ({"tokens_file": _key(admin=False)}, "no admin_key on lab"),
    "port taken": ({"tokens_file": _key(), "ports": {"5000": {"pid": 7, "comm": "nginx", "unit": "nginx.service"}}},
                   "tabbyapi_port=5000: port 5000 is already taken on lab by nginx (pid 7, nginx.service)"),
    "model dir missing": ({"tokens_file": _key(), "paths": _dir_facts(exists=False, files=())},
                          "tabbyapi_target_model='/srv/m/t': no such directory on lab"),
    "no tokenizer": ({"tokens_file": _key(), "paths": _dir_facts(files=("config.json",))},
                     "tabbyapi_target_model='/srv/m/t': has no tokenizer.json on lab"),
    "model under /root": ({"tokens_file": _key(), "paths": {
        "tabbyapi_target_model/config.json": {"path": "/root/t/config.json", "real": "/root/t/config.json",
                                              "exists": True, "blocked": {"at": "/root", "reason": "protect-home"}}}},
        "ProtectHome=yes"),
}


@pytest.mark.parametrize("name", list(HOST))
def test_host_problems_are_one_line_each(name):
    facts, fragment = HOST[name]
    problems = check_tabbyapi_host({"ports": {}, "paths": _dir_facts(), **facts}, "lab",
                                   "/etc/tabbyapi/api_tokens.yml", 5000, ["tabbyapi.service"],
                                   {"tabbyapi_target_model": "/srv/m/t", "tabbyapi_draft_model": ""})
    assert len(problems) == 1 and fragment in problems[0] and "\n" not in problems[0], problems


def test_our_own_unit_on_the_port_is_fine():
    facts = {"tokens_file": _key(), "paths": _dir_facts(),
             "ports": {"5000": {"pid": 7, "comm": "python", "unit": "tabbyapi.service"}}}
    assert check_tabbyapi_host(facts, "lab", "/etc/tabbyapi/api_tokens.yml", 5000, ["tabbyapi.service"],
                               {"tabbyapi_target_model": "/srv/m/t"}) == []
