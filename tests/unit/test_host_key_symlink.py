"""The API key file as a symlink: specops.host.host_facts stats the target (what llama-server reads), and the deploy's
one-line refusal (the ``specops_host_problems`` filter) says the path is a symlink, names its target, and fixes the
target."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

from tests.unit.hostcode import argv

REPO = Path(__file__).resolve().parents[2]
OURS = ["llama-server-speculative.service", "llama-server-baseline.service"]


def host_problems() -> object:
    """The filter as the role calls it (plugins/filter/specops.py)."""
    spec = importlib.util.spec_from_file_location("specops_filter_plugin", REPO / "plugins" / "filter" / "specops.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()["specops_host_problems"]


def facts_of(key: Path) -> dict:
    out = subprocess.run(argv("host_facts", "--key-file", str(key)), capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return json.loads(out)


def test_a_too_open_key_behind_a_symlink_names_the_link_and_its_target(tmp_path: Path) -> None:
    target = tmp_path / "srv" / "keys" / "key"
    target.parent.mkdir(parents=True)
    target.write_text("sk-abc123\n")
    target.chmod(0o644)
    link = tmp_path / "etc" / "key"
    link.parent.mkdir()
    link.symlink_to(target)
    facts = facts_of(link)
    assert facts["key_file"]["symlink"] == str(target) and facts["key_file"]["target"] == str(target)
    assert "sk-abc123" not in json.dumps(facts)
    problems = host_problems()(facts, "h1", str(link), {}, OURS)
    mode = [p for p in problems if "group or others" in p]
    assert mode == [f"llama_server_api_key_file='{link}': {link} (a symlink to {target}) is mode 0644 (the "
                    f"target's), which lets group or others read the key on h1; run: chmod 0600 {target}"]
    # owned by someone else (as when the tests do not run as root): that line names the link and fixes the target
    facts["key_file"].update(uid=1000, gid=1000)
    assert (f"llama_server_api_key_file='{link}': {link} (a symlink to {target}) is owned by uid 1000 gid 1000 on "
            f"h1, not root; run: chown root:root {target}") in host_problems()(facts, "h1", str(link), {}, OURS)


def test_a_relative_symlink_chain_names_the_final_target(tmp_path: Path) -> None:
    target = tmp_path / "key"
    target.write_text("sk-abc123\n")
    target.chmod(0o640)
    (tmp_path / "middle").symlink_to("key")
    link = tmp_path / "api-key"
    link.symlink_to("middle")
    facts = facts_of(link)
    assert facts["key_file"]["symlink"] == "middle" and facts["key_file"]["target"] == str(target)
    problems = host_problems()(facts, "h1", str(link), {}, OURS)
    assert f"{link} (a symlink to {target}) is mode 0640 (the target's)" in " ".join(problems), problems


def test_a_dangling_symlink_says_where_it_points(tmp_path: Path) -> None:
    link = tmp_path / "api-key"
    link.symlink_to(tmp_path / "gone")
    problems = host_problems()(facts_of(link), "h1", str(link), {}, OURS)
    assert problems == [f"llama_server_api_key_file='{link}': {link} (a symlink to {tmp_path / 'gone'}) points to "
                        f"no file on h1; create {tmp_path / 'gone'} (one key per line), then run: chown root:root "
                        f"{tmp_path / 'gone'} && chmod 0600 {tmp_path / 'gone'}"]


def test_a_plain_file_keeps_its_message(tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_text("sk-abc123\n")
    key.chmod(0o644)
    facts = facts_of(key)
    assert "symlink" not in facts["key_file"] and "target" not in facts["key_file"]
    problems = host_problems()(facts, "h1", str(key), {}, OURS)
    assert f"llama_server_api_key_file='{key}': mode 0644 lets group or others read the key on h1; run: chmod 0600 " \
           f"{key}" in problems
