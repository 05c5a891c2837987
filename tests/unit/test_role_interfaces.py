"""What passes between roles is a small, named set of facts (issue 80 item 1): a role never reads another role's
private ``_<role>_*`` fact, and each role's README lists, under "## What it reads and gives", every fact it sets that
another role or a play reads, and every fact another role sets that it reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.unit.test_role_tags import tasks

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())
PLAYS = [REPO / "deploy.yml", *sorted((REPO / "playbooks").rglob("*.yml"))]
SECTION = "## What it reads and gives"


def role_text(role: str) -> str:
    return "\n".join(p.read_text() for p in sorted((ROLES / role).rglob("*")) if p.suffix in (".yml", ".yaml", ".j2"))


def facts_set(role: str) -> set[str]:
    """The public facts a role's tasks make: set_fact keys and registers not starting with an underscore."""
    found: set[str] = set()
    for path in [*(ROLES / role).glob("tasks/*.yml"), *(ROLES / role).glob("handlers/*.yml")]:
        for t in tasks(yaml.safe_load(path.read_text()) or []):
            made = t.get("ansible.builtin.set_fact")
            if isinstance(made, dict):
                found |= {k for k in made if k != "cacheable"}
            if isinstance(t.get("register"), str):
                found.add(t["register"])
    return {f for f in found if not f.startswith("_")}


def mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", text) is not None


def interface() -> dict[str, tuple[str, list[str]]]:
    """fact -> (the role that sets it, the roles that read it; "(play)" for deploy.yml and playbooks/)."""
    texts = {role: role_text(role) for role in NAMES}
    texts["(play)"] = "\n".join(p.read_text() for p in PLAYS)
    out = {}
    for owner in NAMES:
        for fact in facts_set(owner):
            readers = sorted(r for r, text in texts.items() if r != owner and mentions(text, fact))
            if readers:
                out[fact] = (owner, readers)
    return out


def section(role: str) -> str:
    text = (ROLES / role / "README.md").read_text()
    assert f"\n{SECTION}\n" in text, f"roles/{role}/README.md has no '{SECTION}' section"
    return text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]


def owner_of(fact: str) -> str | None:
    """The role a private fact ``_<role>_*`` belongs to: the longest role name it starts with (``_llama_server_tune_x``
    is roles/llama_server_tune's, not roles/llama_server's)."""
    owners = [role for role in NAMES if fact.startswith(f"_{role}_")]
    return max(owners, key=len) if owners else None


def test_no_role_reads_a_private_fact_of_another_role():
    found = [f"roles/{reader}: {fact} (private to roles/{owner})"
             for reader in NAMES for fact in re.findall(r"(?<![\w.])_[a-z]\w+", role_text(reader))
             if (owner := owner_of(fact)) not in (None, reader)]
    assert not found, "a role reads another role's private fact; make it a named fact its README lists:\n" + \
        "\n".join(sorted(set(found)))


def test_a_private_fact_belongs_to_the_longest_role_name_it_starts_with():
    assert owner_of("_llama_server_tune_unit") == "llama_server_tune"
    assert owner_of("_llama_server_profile") == "llama_server"
    assert owner_of("_unrelated") is None


def test_each_role_readme_lists_what_it_gives_and_what_it_reads():
    missing = []
    for fact, (owner, readers) in sorted(interface().items()):
        if not mentions(section(owner), fact):
            missing.append(f"roles/{owner}/README.md does not list {fact}, which it gives to {', '.join(readers)}")
        missing += [f"roles/{r}/README.md does not list {fact}, which it reads from roles/{owner}"
                    for r in readers if r != "(play)" and not mentions(section(r), fact)]
    assert not missing, "\n".join(missing)


def test_the_interface_is_found():
    """The walk sees what it must: the build's result, the models' facts, the play's rollout facts."""
    found = interface()
    assert found["llama_cpp_result"] == ("llama_cpp", ["llama_server"])
    assert found["llama_server_disrupts"] == ("llama_server", ["(play)"])
    assert found["loadbalancer_server_out"] == ("loadbalancer", ["(play)"])
    assert found["specops_models_paths"][0] == "models"
    # the tune and the speed gate, roles of their own: what they give the service's role and the play
    assert found["llama_server_tune_applied"] == ("llama_server_tune", ["llama_server"])
    assert found["llama_server_speed_gate_then"] == ("llama_server_speed_gate", ["llama_server"])
    assert found["llama_server_speed_gate_disputed"] == ("llama_server_speed_gate", ["(play)"])
