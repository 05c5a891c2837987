"""Role includes at most 3 deep (issue 64 item 5): a reader follows any task of a role through at most three
files below the one a play names.

How it is counted: every role's tasks/main.yml is a root at depth 0, and so is every tasks file a play or another
role names with ``tasks_from`` (deploy.yml's ``tasks_from: inputs`` starts a chain at roles/llama_server/tasks/
inputs.yml). Each ``include_tasks``, ``import_tasks``, ``include_role`` or ``import_role`` in a file (in blocks,
rescue and always too) leads to a file one level deeper than the file that holds it: a plain file name relative to
its role's tasks/, ``{{ role_path }}/...`` from the including role, a role by name (its tasks/main.yml, or
``tasks_from``). A templated target names one of the files that variable is set to (TEMPLATED, checked to be every
value the roles give it). The depth of a chain is the depth of its deepest file; a role file reached at depth 4 or
more fails."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.unit.test_role_tags import tasks

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
# the play-level task files (playbooks/tasks/rollout.yml) are read as the plays that include them
PLAYBOOKS = [REPO / "deploy.yml", *sorted((REPO / "playbooks").glob("*.yml")),
             *sorted((REPO / "playbooks" / "tasks").glob("*.yml"))]
MAX_DEPTH = 3
INCLUDE_TASKS = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")
INCLUDE_ROLE = ("ansible.builtin.include_role", "ansible.builtin.import_role")
# the includes whose target is a variable: each value the roles give that variable (test_templated_targets_are_known)
TEMPLATED = {
    "{{ systemd_unit_prove_tasks }}": ["roles/tabbyapi/tasks/verify.yml"],   # systemd_unit/tasks/apply.yml
}


def role_file(role: str, name: str) -> Path:
    path = ROLES / role / "tasks" / name
    return path if path.suffix in (".yml", ".yaml") else path.with_suffix(".yml")


def targets(path: Path) -> Iterator[Path]:
    """The files the includes of ``path`` (a role's task file) lead to."""
    role = path.relative_to(ROLES).parts[0]
    for t in tasks(yaml.safe_load(path.read_text())):
        for key in INCLUDE_TASKS:
            if key in t:
                spec = t[key]
                name = str(spec["file"] if isinstance(spec, dict) else spec)
                for value in TEMPLATED.get(name, [name]):
                    value = value.replace("{{ role_path }}", str(ROLES / role))
                    yield (REPO / value if value.startswith("roles/") else path.parent / value).resolve()
        for key in INCLUDE_ROLE:
            if key in t:
                spec = t[key]
                for tasks_from in TEMPLATED.get(str(spec.get("tasks_from", "main")), [spec.get("tasks_from", "main")]):
                    yield role_file(spec["name"], tasks_from)


def roots() -> list[Path]:
    """Every role's tasks/main.yml, and every file named by tasks_from in a playbook or a role."""
    found = {p for p in ROLES.glob("*/tasks/main.yml")}
    for path in [*PLAYBOOKS, *ROLES.glob("*/tasks/*.yml")]:
        for t in tasks(yaml.safe_load(path.read_text())):
            for key in INCLUDE_ROLE:
                if key in t and "tasks_from" in t[key] and "{{" not in str(t[key]["tasks_from"]):
                    found.add(role_file(t[key]["name"], t[key]["tasks_from"]))
    return sorted(found)


def deepest(path: Path, chain: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    """The longest chain of includes from ``path`` (itself first); a file already in the chain ends it."""
    chain = (*chain, path)
    best = chain
    for target in targets(path):
        assert target.is_file(), f"{path.relative_to(REPO)} includes {target}, which does not exist"
        if target in chain:
            continue
        found = deepest(target, chain)
        if len(found) > len(best):
            best = found
    return best


def depth_report() -> dict[str, tuple[int, str]]:
    """root -> (depth, the chain that reaches it)."""
    out = {}
    for root in roots():
        chain = deepest(root)
        out[str(root.relative_to(REPO))] = (len(chain) - 1, " -> ".join(str(p.relative_to(ROLES)) for p in chain))
    return out


def test_templated_targets_are_known():
    """Every include whose target is a variable is in TEMPLATED, with every value the roles give that variable."""
    seen = set()
    for path in ROLES.glob("*/tasks/*.yml"):
        for t in tasks(yaml.safe_load(path.read_text())):
            for key in (*INCLUDE_TASKS, *INCLUDE_ROLE):
                if key in t:
                    spec = t[key]
                    name = str(spec.get("file", spec.get("tasks_from", "")) if isinstance(spec, dict) else spec)
                    if "{{" in name.replace("{{ role_path }}", ""):
                        assert name in TEMPLATED, f"{path.relative_to(REPO)}: include of {name}: add it to TEMPLATED"
                        seen.add(name)
    assert seen == set(TEMPLATED)
    texts = "\n".join(p.read_text() for p in ROLES.glob("*/tasks/*.yml"))
    prove = set(re.findall(r"systemd_unit_prove_tasks: \"\{\{ role_path \}\}/\.\./(\S+)\"", texts))
    assert {f"roles/{p}" for p in prove} == set(TEMPLATED["{{ systemd_unit_prove_tasks }}"]), prove


def test_the_walk_reaches_the_includes():
    report = depth_report()
    assert "roles/llama_server/tasks/main.yml" in report and "roles/deploy_lock/tasks/acquire.yml" in report
    assert report["roles/llama_server/tasks/main.yml"][0] >= 2, report


def test_role_includes_are_at_most_three_deep():
    too_deep = {root: chain for root, (depth, chain) in depth_report().items() if depth > MAX_DEPTH}
    assert not too_deep, f"includes deeper than {MAX_DEPTH} (main.yml is depth 0):\n" + "\n".join(
        f"{root}: {chain}" for root, chain in too_deep.items())


def test_the_play_takes_a_host_out_of_the_pool_and_no_role_does():
    """The load balancer at the play (issue 80 item 2): playbooks/tasks/rollout.yml, which deploy.yml's serial plays
    run, drains a host from the pool before the role applies what disrupts it and puts it back after; no role's task
    file includes roles/loadbalancer (so none copies those tasks, and none reaches past the depth for them)."""
    in_roles = [f"{p.relative_to(REPO)}: {t.get('name')}" for p in sorted(ROLES.glob("*/tasks/*.yml"))
                if p.parts[-3] != "loadbalancer" for t in tasks(yaml.safe_load(p.read_text()))
                if (t.get("ansible.builtin.include_role") or {}).get("name") == "loadbalancer"]
    assert not in_roles, f"a role includes roles/loadbalancer (the play does that): {in_roles}"
    rollout = REPO / "playbooks" / "tasks" / "rollout.yml"
    steps = [(t["ansible.builtin.include_role"]["name"], t["ansible.builtin.include_role"].get("tasks_from", "main"))
             for t in tasks(yaml.safe_load(rollout.read_text())) if "ansible.builtin.include_role" in t]
    assert steps == [("llama_server", "main"), ("loadbalancer", "drain"), ("llama_server", "apply"),
                     ("loadbalancer", "ready")], steps
    def included(t: dict) -> str:
        spec = t.get("ansible.builtin.include_tasks") or ""
        return str(spec.get("file", "") if isinstance(spec, dict) else spec)

    deploy = [t for t in tasks(yaml.safe_load((REPO / "deploy.yml").read_text()))
              if included(t).endswith("rollout.yml")]
    assert len(deploy) == 2, "the first pass and the second (a host that tunes for itself) run the same rollout"
