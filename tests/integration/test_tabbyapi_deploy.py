"""roles/tabbyapi deployed onto a lab systemd host (issue 28): the shared unit pipeline (roles/systemd_unit) stages,
verifies, installs and keeps the known-good unit; a failing start rolls back to it; every bad input is refused in
one line by the first play of playbooks/tabbyapi.yml with nothing changed on the host; the installed unit's
`systemd-analyze security` exposure is at most 2.0.

**TabbyAPI itself is not what runs here**: it needs a CUDA GPU, which the lab host has not. A stand-in process
(tests/integration/tabbyapi_standin.py) is installed as ``<tabbyapi_install_dir>/app/main.py`` and run by the
unit exactly as TabbyAPI would be (venv/bin/python → a link to the host's python3); it reads the rendered
config.yml and api_tokens.yml, "loads" the model directories (config.json, safetensors headers: a corrupt one
fails the start as ExLlamaV2 does) and serves TabbyAPI's /health and /v1/model. The install phase (source
archive, pip with CUDA torch) is left out (``--tags tabbyapi_configure``: the inputs and the preflight carry every
tabbyapi_* tag, the install only its own); everything else is the real role.

The models are a Mistral 7B tokenizer and config (tests/unit/tabbyapi_tokenizers.py, cached) as target and draft,
in a directory whose name holds a space and a % (``/srv/tabby models %``), so the escaping is exercised end to end.
Run with -s to see the refusal table.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import lab

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "integration" / "tabbyapi_standin.py"
UNIT = "tabbyapi"
MODELS = "/srv/tabby models %"
TARGET = f"{MODELS}/Mistral-7B-exl2"
DRAFT = f"{MODELS}/Mistral-draft-exl2"
BROKEN = f"{MODELS}/Mistral-broken-exl2"
TOKENS = "/etc/tabbyapi/api_tokens.yml"
TEST_DIR = "/etc/tabbyapi-inputs-test"
SQUAT_PORT = 5090
SQUAT = lab.squatter(SQUAT_PORT, "specops-tabby-squatter")  # (setup, teardown): the port taken by another unit
API_KEY = "tabby-key-3f9a"
BASE = {"tabbyapi_hosts": "llama_servers", "tabbyapi_models_dir": MODELS, "tabbyapi_target_model": TARGET,
        "tabbyapi_draft_model": DRAFT, "tabbyapi_draft_n_max": 4, "tabbyapi_health_timeout": 60}


def deploy(labhost, *extra: str, **overrides: object) -> lab.PlaybookRun:
    return lab.ansible_playbook("playbooks/tabbyapi.yml", "-i", str(labhost.inventory), "--tags", "tabbyapi_configure",
                                "-e", json.dumps({**BASE, **overrides}), *extra, timeout=900)


def host_state(labhost) -> dict:
    return {"unit": lab.file_sha(labhost, f"/etc/systemd/system/{UNIT}.service"),
            "config": lab.file_sha(labhost, "/etc/tabbyapi/config.yml"),
            "known-good": lab.file_sha(labhost, f"/etc/specops/known-good/{UNIT}.service"),
            "pid": labhost.show(f"{UNIT}.service", "MainPID"), "restarts": labhost.show(f"{UNIT}.service", "NRestarts")}


def model_card(labhost, key: str = API_KEY, port: int = 5000) -> dict:
    code = ("import json,sys,urllib.request;r=urllib.request.Request(sys.argv[1],headers={'x-api-key':sys.argv[2]});"
            "print(urllib.request.urlopen(r,timeout=30).read().decode())")
    return json.loads(labhost.run(["python3", "-c", code, f"http://127.0.0.1:{port}/v1/model", key]).stdout)


def put_model(labhost, path: str, tokenizer_dir: Path, *, tensor: bytes | None = None,
              files: tuple[str, ...] = ("config.json", "tokenizer.json", "tokenizer_config.json")) -> None:
    """A model directory on the host: the tokenizer directory's files and one safetensors file."""
    labhost.run(["mkdir", "-p", path])
    for name in files:
        text = (tokenizer_dir / name).read_text()
        if name == "config.json":   # an EXL2 quant, as TabbyAPI's exllamav2 backend loads (and the fit reads)
            text = json.dumps({**json.loads(text), "quantization_config": {"quant_method": "exl2", "bits": 4.0}})
        labhost.run(["sh", "-c", 'cat > "$1"', "sh", f"{path}/{name}"], input=text)
    header = json.dumps({"__metadata__": {"format": "pt"}}).encode()
    data = tensor if tensor is not None else struct.pack("<Q", len(header)) + header
    labhost.run(["python3", "-c", "import sys;open(sys.argv[1],'wb').write(bytes.fromhex(sys.argv[2]))",
                 f"{path}/model.safetensors", data.hex()])
    labhost.run(["chmod", "-R", "a+rX", path])


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, Path]:
    from tests.unit.tabbyapi_tokenizers import exported_dir, mistral_dir
    return {"mistral": mistral_dir(), "llama": exported_dir("llama-spm")}


@pytest.fixture(scope="module")
def stand_in(labhost, tokenizers):
    """The stand-in where TabbyAPI would be installed, the models and api_tokens.yml."""
    labhost.run(["sh", "-c", "mkdir -p /opt/tabbyapi/app/templates /opt/tabbyapi/app/sampler_overrides "
                 "/opt/tabbyapi/venv/bin /etc/tabbyapi && ln -sfn /usr/bin/python3 /opt/tabbyapi/venv/bin/python"])
    labhost.run(["sh", "-c", "cat > /opt/tabbyapi/app/main.py"], input=STANDIN.read_text())
    labhost.run(["sh", "-c", f'umask 077; printf "api_key: {API_KEY}\\nadmin_key: tabby-admin-77\\n" > {TOKENS}'])
    put_model(labhost, TARGET, tokenizers["mistral"])
    put_model(labhost, DRAFT, tokenizers["mistral"])
    put_model(labhost, BROKEN, tokenizers["mistral"], tensor=b"this is not a safetensors file")
    labhost.run(["sh", "-c", f"rm -rf {TEST_DIR}; mkdir -p {TEST_DIR}"])
    yield
    labhost.run(["sh", "-c", f"systemctl disable --now {UNIT} specops-tabby-squatter; "
                 f"rm -rf /etc/systemd/system/{UNIT}.service /etc/specops/known-good/{UNIT}.* "
                 f"/etc/specops/staging/{UNIT}.* /opt/tabbyapi /etc/tabbyapi '{MODELS}' {TEST_DIR}; "
                 "systemctl daemon-reload"], check=False)


@pytest.fixture(scope="module")
def deployed(labhost, stand_in):
    t0 = time.monotonic()
    run = deploy(labhost)
    print(f"\nTABBYAPI DEPLOY | {time.monotonic() - t0:.1f} s")
    assert run.rc == 0, run.output[-6000:]
    return run


def test_deploy_stages_verifies_installs_and_keeps_known_good(deployed, labhost):
    text = deployed.text
    for task in ("Render the units and check them with systemd-analyze verify on the host",
                 "Render the unit into staging", "Check the staged unit with systemd-analyze verify",
                 "Install the staged unit", "Wait for /health",
                 "Prove the target and the draft are the configured ones", "Remember this unit as known-good"):
        assert task in text, task
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    live = labhost.run(["cat", f"/etc/systemd/system/{UNIT}.service"]).stdout
    assert live == labhost.run(["cat", f"/etc/specops/staging/{UNIT}.service"]).stdout
    assert live == labhost.run(["cat", f"/etc/specops/known-good/{UNIT}.service"]).stdout
    assert 'ReadOnlyPaths="/srv/tabby models %%"' in live, live
    assert "Description=TabbyAPI (exllamav2) Mistral-7B-exl2 + draft Mistral-draft-exl2, port 5000" in live
    assert (labhost.run(["cat", "/etc/tabbyapi/config.yml"]).stdout
            == labhost.run(["cat", f"/etc/specops/known-good/{UNIT}.config.yml"]).stdout)
    card = model_card(labhost)
    assert card["id"] == "Mistral-7B-exl2" and card["parameters"]["draft"]["id"] == "Mistral-draft-exl2"
    # systemd read the hostile directory back unchanged
    shown = labhost.run(["systemctl", "show", "-p", "ReadOnlyPaths", "--value", UNIT]).stdout.strip()
    assert shown.strip('"') == MODELS, shown
    assert "tabby-key" not in deployed.output and "tabby-admin" not in deployed.output   # no_log held


def test_rerun_changes_nothing(deployed, labhost):
    pid = labhost.show(f"{UNIT}.service", "MainPID")
    run = deploy(labhost)
    assert run.rc == 0, run.output[-4000:]
    assert run.recap(labhost.name).get("changed") == 0, run.output[-4000:]
    assert labhost.show(f"{UNIT}.service", "MainPID") == pid


def test_a_failing_start_rolls_back_to_the_known_good_unit(deployed, labhost):
    before = host_state(labhost)
    run = deploy(labhost, tabbyapi_target_model=BROKEN, tabbyapi_draft_model="")
    assert run.rc != 0, run.output[-4000:]
    line = lab.refusal_line(run.text, "The new TabbyAPI configuration failed")
    print(f"\nROLLBACK | {line}")
    assert "Error while deserializing header" in line, line
    assert "The last known-good unit was put back and answers /health again on http://127.0.0.1:5000" in line, line
    # the unit and config.yml are the known-good ones again, and serve the known-good model
    after = host_state(labhost)
    assert {k: after[k] for k in ("unit", "config", "known-good")} == {
        k: before[k] for k in ("unit", "config", "known-good")}
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    assert model_card(labhost)["id"] == "Mistral-7B-exl2"
    # the staged (refused) configuration is still there to look at
    assert "Mistral-broken-exl2" in labhost.run(["cat", f"/etc/specops/staging/{UNIT}.config.yml"]).stdout


def test_security_exposure_is_at_most_2(deployed, labhost):
    out = labhost.run(["systemd-analyze", "security", f"{UNIT}.service"], check=False)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout + out.stderr)
    assert match, out.stdout[-2000:] + out.stderr[-2000:]
    print(f"\nSECURITY | systemd-analyze security {UNIT}.service on the lab host: {match.group(1)}")
    assert float(match.group(1)) <= 2.0


def tokens_file(name: str, content: str, mode: str = "0600", owner: str = "root:root") -> Callable:
    def setup(labhost) -> None:
        labhost.run(["sh", "-c", f'printf "$1" > {TEST_DIR}/{name} && chmod {mode} {TEST_DIR}/{name} && '
                     f"chown {owner} {TEST_DIR}/{name}", "sh", content])
    return setup


def model_dir(path: str, which: str, files: tuple[str, ...] = ("config.json", "tokenizer.json")) -> Callable:
    def setup(labhost) -> None:
        from tests.unit.tabbyapi_tokenizers import exported_dir, mistral_dir
        put_model(labhost, path, mistral_dir() if which == "mistral" else exported_dir("llama-spm"), files=files)
    return setup


def behind_root(labhost) -> None:
    from tests.unit.tabbyapi_tokenizers import mistral_dir
    put_model(labhost, "/root/tabby-model", mistral_dir())
    labhost.run(["ln", "-sfn", "/root/tabby-model", f"{TEST_DIR}/linked-model"])


@dataclass
class Case:
    overrides: dict
    variable: str
    fragment: str
    setup: Callable | None = None
    teardown: Callable | None = None


CASES = {
    "relative models dir": Case({"tabbyapi_models_dir": "srv/models"}, "tabbyapi_models_dir", "not an absolute path"),
    "newline in the target path": Case({"tabbyapi_target_model": "/srv/tabby\nmodels"}, "tabbyapi_target_model",
                                       "contains a newline"),
    "port out of range": Case({"tabbyapi_port": 70000}, "tabbyapi_port", "must be at most 65535"),
    "privileged port": Case({"tabbyapi_port": 443}, "tabbyapi_port", "pick a port of 1024 or more"),
    "string where a number belongs": Case({"tabbyapi_ctx_size": "lots"}, "tabbyapi_ctx_size", "not a whole number"),
    "unknown backend": Case({"tabbyapi_backend": "exllamav4"}, "tabbyapi_backend", "not one of exllamav2, exllamav3"),
    "unknown cache mode": Case({"tabbyapi_cache_mode": "Q5"}, "tabbyapi_cache_mode", "unknown cache mode"),
    "state dir outside /var/lib": Case({"tabbyapi_state_dir": "/srv/tabby"}, "tabbyapi_state_dir",
                                       "directly under /var/lib"),
    "memory limit systemd cannot read": Case({"tabbyapi_memory_max": "lots"}, "tabbyapi_memory_max",
                                             "not a size systemd reads"),
    "quote in the install dir": Case({"tabbyapi_install_dir": "/opt/o'brien"}, "tabbyapi_install_dir",
                                     "refuses an executable path"),
    "draft with spec type none": Case({"tabbyapi_spec_type": "none"}, "tabbyapi_draft_model", "does not use a draft"),
    "API tokens file missing": Case({"tabbyapi_api_tokens_file": f"{TEST_DIR}/missing.yml"},
                                    "tabbyapi_api_tokens_file", "no such file on"),
    "API tokens file readable by others": Case(
        {"tabbyapi_api_tokens_file": f"{TEST_DIR}/tokens-0644.yml"}, "tabbyapi_api_tokens_file",
        f"run: chmod 0600 {TEST_DIR}/tokens-0644.yml",
        setup=tokens_file("tokens-0644.yml", "api_key: a\\nadmin_key: b\\n", mode="0644")),
    "API tokens file not root's": Case(
        {"tabbyapi_api_tokens_file": f"{TEST_DIR}/tokens-user.yml"}, "tabbyapi_api_tokens_file",
        f"run: chown root:root {TEST_DIR}/tokens-user.yml",
        setup=tokens_file("tokens-user.yml", "api_key: a\\nadmin_key: b\\n", owner="1000:1000")),
    "API tokens file without admin_key": Case(
        {"tabbyapi_api_tokens_file": f"{TEST_DIR}/tokens-noadmin.yml"}, "tabbyapi_api_tokens_file",
        "no admin_key", setup=tokens_file("tokens-noadmin.yml", "api_key: a\\n")),
    "port taken by another process": Case({"tabbyapi_port": SQUAT_PORT}, "tabbyapi_port",
                                          f"port {SQUAT_PORT} is already taken", setup=SQUAT[0], teardown=SQUAT[1]),
    "target directory missing": Case({"tabbyapi_target_model": f"{MODELS}/nothing-here"}, "tabbyapi_target_model",
                                     "no such directory"),
    "target without tokenizer.json": Case({"tabbyapi_target_model": f"{TEST_DIR}/no-tokenizer"},
                                          "tabbyapi_target_model", "has no tokenizer.json",
                                          setup=model_dir(f"{TEST_DIR}/no-tokenizer", "mistral",
                                                          files=("config.json",))),
    "target behind a symlink into /root": Case({"tabbyapi_target_model": f"{TEST_DIR}/linked-model"},
                                               "tabbyapi_target_model", "ProtectHome=yes", setup=behind_root,
                                               teardown=lambda h: h.run(["rm", "-rf", "/root/tabby-model"])),
    "draft with another vocabulary": Case({"tabbyapi_draft_model": f"{TEST_DIR}/llama-draft"},
                                          "tabbyapi_draft_model", "the draft does not match the target",
                                          setup=model_dir(f"{TEST_DIR}/llama-draft", "llama")),
    "does not fit the GPUs": Case({"tabbyapi_gpus": ["2GiB"]}, "tabbyapi_gpus", "DOES NOT FIT"),
}
REFUSALS: list[tuple[str, str, float]] = []


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_in_one_line_and_changes_nothing(deployed, labhost, name):
    case = CASES[name]
    if case.setup:
        case.setup(labhost)
    try:
        before = host_state(labhost)
        t0 = time.monotonic()
        run = deploy(labhost, **case.overrides)
        elapsed = time.monotonic() - t0
        after = host_state(labhost)
    finally:
        if case.teardown:
            case.teardown(labhost)
    assert run.rc != 0, run.output[-3000:]
    line = lab.refusal_line(run.text, case.fragment)
    REFUSALS.append((name, line, elapsed))
    print(f"\nREFUSAL | {name} | {elapsed:.1f} s | {line}")
    assert line.startswith(f"{case.variable}=") and " | " not in line, line
    assert "Traceback" not in run.text and "stderr_lines" not in run.text
    # refused in the first play: nothing was staged, installed or restarted
    assert "Deploy TabbyAPI" not in run.text and "Render the unit into staging" not in run.text
    assert after == before, (before, after)
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"


def test_refusal_table(deployed):
    """Prints the table collected above (input, message, time to refusal) for the note."""
    for name, line, elapsed in REFUSALS:
        print(f"| {name} | `{line}` | {elapsed:.1f} s |")
    assert all(elapsed > 0 for _, _, elapsed in REFUSALS)


@pytest.fixture(autouse=True)
def _needs_tools():
    if shutil.which("systemd-analyze") is None:
        pytest.skip("needs systemd-analyze")
