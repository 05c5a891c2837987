"""Tags by role, as prometheus-community's node_exporter role has them (issue 41, item 4): every tag in roles/,
deploy.yml and playbooks/ is ``<role>_<phase>`` (or ``always``/``never``); each role's preflight carries all of
its role's tags, so one phase run alone (``--tags llama_server_configure``) has the facts it needs; the deploy
lock is taken and released under any tags. The last test asks Ansible itself what deploy.yml runs under
``--tags llama_server_configure`` (``--list-tasks``; no host is contacted). The lab run of that tag:
tests/integration/test_tags.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
PHASES = ("preflight", "install", "configure", "verify", "tune")  # tune: llama_server only (issue 52)
SPECIAL = {"always", "never"}
# the play-level task files (playbooks/tasks/rollout.yml) are read as the plays that include them
PLAYBOOKS = [REPO / "deploy.yml", *sorted((REPO / "playbooks").glob("*.yml")),
             *sorted((REPO / "playbooks" / "tasks").glob("*.yml"))]
TASK_FILES = sorted((REPO / "roles").glob("*/tasks/*.yml")) + sorted((REPO / "roles").glob("*/handlers/*.yml"))
LLAMA_SERVER = {f"llama_server_{p}" for p in PHASES}
INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.include_role", "ansible.builtin.import_tasks",
            "ansible.builtin.import_role")


def tag_list(value: object) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def tasks(node: object) -> Iterator[dict]:
    """Every play, task and block in a parsed playbook or task file, nested ones included."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            if isinstance(node.get(key), list):
                yield from tasks(node[key])


def load(path: Path) -> object:
    return yaml.safe_load(path.read_text())


def every_tag() -> Iterator[tuple[str, str, str]]:
    """(file, task name, tag) for every tag: on plays, tasks, blocks, ``apply``, and roles listed in a play."""
    for path in [*PLAYBOOKS, *TASK_FILES]:
        for t in tasks(load(path)):
            name = str(t.get("name", "?"))
            for tag in tag_list(t.get("tags")):
                yield str(path.relative_to(REPO)), name, tag
            for key in INCLUDES:
                if isinstance(t.get(key), dict):
                    for tag in tag_list((t[key].get("apply") or {}).get("tags")):
                        yield str(path.relative_to(REPO)), name + " (apply)", tag
            for role in t.get("roles") or []:
                if isinstance(role, dict):
                    for tag in tag_list(role.get("tags")):
                        yield str(path.relative_to(REPO)), f"{name} (role {role.get('role')})", tag


def role_tags(role: str) -> set[str]:
    """The tags of a role's own phases: those of its tasks/main.yml with its prefix."""
    main = REPO / "roles" / role / "tasks" / "main.yml"
    if not main.is_file():
        return set()
    return {tag for t in tasks(load(main)) for tag in tag_list(t.get("tags")) if tag.startswith(f"{role}_")}


def test_every_tag_is_prefixed_by_a_role_and_names_a_phase():
    found = list(every_tag())
    assert len(found) > 40, found  # the walk reaches the tags
    pattern = re.compile(rf"^({'|'.join(ROLES)})_({'|'.join(PHASES)})$")
    bad = [f"{path}: {name}: {tag}" for path, name, tag in found if tag not in SPECIAL and not pattern.match(tag)]
    assert not bad, "tags must be <role>_<phase> (or always/never):\n" + "\n".join(bad)


def test_the_bare_phase_tags_are_gone():
    assert not [t for t in every_tag() if t[2] in PHASES]


@pytest.mark.parametrize("role", ["exporter", "llama_cpp", "llama_server", "loadbalancer", "models", "monitoring",
                                  "tabbyapi"])
def test_each_roles_preflight_carries_all_of_its_roles_tags(role):
    main = load(REPO / "roles" / role / "tasks" / "main.yml")
    mine = role_tags(role)
    assert f"{role}_preflight" in mine and f"{role}_install" in mine, mine
    assert mine <= {f"{role}_{p}" for p in PHASES}
    top = [t for t in main if isinstance(t, dict)]
    # the preflight comes first; every task that carries the preflight tag carries all of the role's tags
    assert f"{role}_preflight" in tag_list(top[0].get("tags")), top[0]
    preflight = [t for t in tasks(main) if f"{role}_preflight" in tag_list(t.get("tags"))]
    short = {t.get("name"): sorted(mine - set(tag_list(t.get("tags")))) for t in preflight
             if not mine <= set(tag_list(t.get("tags")))}
    assert not short, f"roles/{role}: preflight tasks missing tags of the role: {short}"
    # an include's apply hands its tags to the included tasks: the preflight's must be all of them too
    for t in preflight:
        for key in INCLUDES:
            if isinstance(t.get(key), dict) and t[key].get("apply"):
                assert mine <= set(tag_list(t[key]["apply"].get("tags"))), t


def test_an_include_with_apply_applies_exactly_the_tags_it_runs_under():
    """Tags on include_tasks/include_role select the include only; ``apply`` hands them to the included tasks. The
    two must match, and a tasks_from include tagged for phases must apply them (its tasks carry no tags)."""
    problems = []
    for path in [*PLAYBOOKS, *TASK_FILES]:
        for t in tasks(load(path)):
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.include_role"):
                spec = t.get(key)
                if not isinstance(spec, dict):
                    continue
                tags = set(tag_list(t.get("tags")))
                applied = set(tag_list((spec.get("apply") or {}).get("tags")))
                where = f"{path.relative_to(REPO)}: {t.get('name')}"
                if spec.get("apply") and applied != tags:
                    problems.append(f"{where}: tags {sorted(tags)} but apply {sorted(applied)}")
                if (key.endswith("include_role") and spec.get("tasks_from") and tags - SPECIAL
                        and spec.get("name") != "deploy_lock" and not applied):
                    problems.append(f"{where}: tagged {sorted(tags)} without apply: its tasks would not run")
    assert not problems, "\n".join(problems)


def test_the_deploy_lock_is_taken_and_released_under_any_tags():
    for name in ("acquire", "release"):
        for t in load(REPO / "roles" / "deploy_lock" / "tasks" / f"{name}.yml"):
            assert "always" in tag_list(t.get("tags")), (name, t.get("name"))
    includes = [(path.name, t) for path in PLAYBOOKS for t in tasks(load(path))
                if (t.get("ansible.builtin.include_role") or {}).get("name") == "deploy_lock"]
    assert len(includes) >= 5, includes  # deploy.yml: servers, load balancers, release; tabbyapi.yml: take, release
    assert all("always" in tag_list(t.get("tags")) for _, t in includes), includes
    for path in PLAYBOOKS:
        assert not [p for p in tasks(load(path)) if "hosts" in p and p.get("tags")], \
            f"{path.name}: a play-level tag would hold back every task of the play, the lock's included"


def test_what_llama_server_reads_from_other_roles_is_made_under_its_tags():
    """The facts llama_server's phases read from another role: the build (hostvars[builder].llama_cpp_result: the
    llama_cpp preflight, the stub link and the capabilities), the models' facts (deploy.yml's models preflight)."""
    main = load(REPO / "roles" / "llama_cpp" / "tasks" / "main.yml")
    under_llama_server = {t["name"] for t in main if set(tag_list(t.get("tags"))) >= LLAMA_SERVER}
    # the build is read (preflight, capabilities) and a missing one refused, never made (install.yml, the link)
    assert under_llama_server == {
        "Preflight (nothing changes on the host before these pass)",
        "The build is installed, or this run builds it",
        "No NVIDIA driver on this builder - link CUDA's stub libcuda so --version/--help run"
        " (they report \"no device\")",
        "Capabilities of the installed llama-server (llama_cpp_result)"}, under_llama_server
    assert not [t["name"] for t in main if set(tag_list(t.get("tags"))) & LLAMA_SERVER
                and t["name"] not in under_llama_server]
    deploy = {t.get("name"): t for t in tasks(load(REPO / "deploy.yml"))}
    for name in ("Check every input against the argument specs, the host's API key file and its ports",
                 "Room for this deploy on the host (disk for the models and the build; context against training)",
                 "Fetch and verify models on the controller; check the pair",
                 "Compose the profile, render its arguments, fit it in memory, render and verify the units on the host",
                 "The service - build, tune, stage; out of the pool, apply, prove; back into the pool"):
        assert set(tag_list(deploy[name].get("tags"))) >= LLAMA_SERVER, name
    assert set(tag_list(deploy["Install models on the host (read-only to the service)"]["tags"])) == {"models_install"}


def listed(tags: str) -> list[tuple[str, set[str]]]:
    """(task name, tags) of every task ``ansible-playbook deploy.yml --tags TAGS --list-tasks`` lists."""
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "deploy.yml", "-i", "inventory/builder.yml",
         "--tags", tags, "--list-tasks"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = []
    for line in proc.stdout.splitlines():
        m = re.match(r"^\s{6}(\S.*?)\tTAGS: \[(.*)\]$", line)
        if m:
            out.append((m.group(1), {t.strip() for t in m.group(2).split(",") if t.strip()}))
    assert out, proc.stdout
    return out


def test_deploy_with_llama_server_configure_alone_runs_what_that_phase_needs():
    names = [n for n, _ in listed("llama_server_configure")]
    text = "\n".join(names)
    for needed in ("Check every input against the argument specs", "Take this host's deploy lock",
                   "Room for this deploy on the host", "llama_cpp : Compute the build id and paths",
                   "llama_cpp : Read llama-server --help", "llama_cpp : Export the result for other roles",
                   "Fetch and verify models on the controller", "Compose the profile, render its arguments",
                   "The service - build, tune, stage; out of the pool, apply, prove", "Release this host's deploy lock",
                   "Take the load balancer's deploy lock"):
        assert needed in text, f"{needed!r} is not run under --tags llama_server_configure:\n{text}"
    for left_out in ("Source, build and install", "CUDA libraries from PyPI wheels", "Point the current link",
                     "Install models on the host", "Install and configure HAProxy", "Install specops-exporter",
                     "Install and configure Prometheus"):
        assert left_out not in text, f"{left_out!r} runs under --tags llama_server_configure:\n{text}"


def test_llama_server_tune_alone_runs_what_configure_runs():
    """Issue 52 item 4: re-tune without a whole deploy, `--tags llama_server_tune -e llama_server_tune_refresh=true`:
    the inputs, the lock, the build's facts (nothing built), the models' preflight, the tune, and the configure and
    verify block that renders its choice, restarts and proves it: what --tags llama_server_configure runs."""
    tune = [n for n, _ in listed("llama_server_tune")]
    assert tune == [n for n, _ in listed("llama_server_configure")]
    # the tune's include is in it
    assert "The service - build, tune, stage; out of the pool, apply, prove" in "\n".join(tune), tune


def test_models_install_alone_fetches_and_installs_without_the_service():
    names = "\n".join(n for n, _ in listed("models_install"))
    assert "Install models on the host" in names and "Fetch and verify models on the controller" in names
    assert "Take this host's deploy lock" in names and "Release this host's deploy lock" in names
    assert "The service - build, tune, stage" not in names and "llama_cpp : Read llama-server --help" not in names
