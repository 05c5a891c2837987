"""The host's side of the deploy's first play, read from what ``specops.host.host_facts`` reports there: the API key
file and its lines (llama-server) or api_tokens.yml (TabbyAPI), the ports, whether the service user can read the
models; and ``systemd-analyze verify``'s verdict on the rendered units. One line per problem, naming the variable,
its value and the fix. The inputs' own checks are :mod:`specops.deploycheck`'s."""

from __future__ import annotations

import stat
from typing import Any

SERVICE_USER = "the service user (systemd DynamicUser)"


def check_tabbyapi_host(facts: dict[str, Any], host: str, tokens_file: str, port: int, our_units: list[str],
                        models: dict[str, str]) -> list[str]:
    """Problems found on the host for TabbyAPI (``facts`` from host_facts.py): api_tokens.yml present, a regular
    file, root-only, with an ``api_key`` and an ``admin_key`` (their shape only, never the keys); the port free
    or ours; each model directory (``models``: variable -> directory) holding config.json and tokenizer.json that
    the service user can read."""
    problems: list[str] = []
    name = "tabbyapi_api_tokens_file"
    key = facts.get("tokens_file") or {}
    if not key.get("exists"):
        problems.append(f"{name}={tokens_file!r}: no such file on {host}; create it there (api_key: ... and "
                        f"admin_key: ...), then run: chown root:root {tokens_file} && chmod 0600 {tokens_file}")
    elif not stat.S_ISREG(int(key.get("mode", 0))):
        kind = "a directory" if stat.S_ISDIR(int(key.get("mode", 0))) else "not a regular file"
        problems.append(f"{name}={tokens_file!r}: {kind} on {host}; point it at api_tokens.yml itself")
    else:
        if int(key.get("uid", -1)) != 0 or int(key.get("gid", -1)) != 0:
            problems.append(f"{name}={tokens_file!r}: owned by uid {key.get('uid')} gid {key.get('gid')} on {host}, "
                            f"not root; run: chown root:root {tokens_file}")
        if int(key["mode"]) & 0o077:
            problems.append(f"{name}={tokens_file!r}: mode {stat.S_IMODE(int(key['mode'])):04o} lets group or "
                            f"others read the keys on {host}; run: chmod 0600 {tokens_file}")
        tokens = key.get("tokens") or {}
        missing = [k for k in ("api_key", "admin_key") if not tokens.get(k)]
        if missing:
            problems.append(f"{name}={tokens_file!r}: no {' and no '.join(missing)} on {host} (TabbyAPI would "
                            "write fresh keys nobody knows into its working directory); write "
                            f"{' and '.join(m + ': <key>' for m in missing)} into it")
    problems += check_host({"ports": facts.get("ports") or {}}, host, "", {"tabbyapi_port": int(port)}, our_units)
    paths = facts.get("paths") or {}
    models_dir = paths.get("tabbyapi_models_dir/") or {}
    if models_dir and not models_dir.get("exists", True) and not models_dir.get("blocked"):
        problems.append(f"tabbyapi_models_dir={models_dir.get('path', '')!r}: no such directory on {host}; the unit "
                        "mounts it read-only (ReadOnlyPaths=) and would not start without it: create it or point "
                        "tabbyapi_models_dir at the models")
    for var, directory in models.items():
        if not directory:
            continue
        problem = _model_dir_problem(var, directory, paths, host)
        if problem:
            problems.append(problem)
    return problems


def _model_dir_problem(var: str, directory: str, paths: dict[str, Any], host: str) -> str | None:
    """The first problem with one model directory (host_facts.py facts of ``<var>/`` and of its config.json and
    tokenizer.json): unresolvable, hidden from the unit, missing, not traversable, a file missing or unreadable."""
    hidden = ("protect-home", "private-tmp")
    dir_facts = paths.get(f"{var}/") or {}
    if dir_facts.get("error"):
        return f"{var}={directory!r}: cannot be resolved on {host} ({dir_facts['error']}); fix the path or its symlinks"
    if (dir_facts.get("blocked") or {}).get("reason") in hidden:
        return _path_problem(var, dir_facts, host)
    if dir_facts and not dir_facts.get("exists", True):
        return (f"{var}={directory!r}: no such directory on {host}; put the model there (a Hugging Face model "
                "directory: config.json, tokenizer.json, *.safetensors)")
    for wanted in ("config.json", "tokenizer.json"):
        path_facts = paths.get(f"{var}/{wanted}") or {}
        if path_facts.get("error"):
            return f"{var}={directory!r}: cannot be resolved on {host} ({path_facts['error']}); fix the path"
        blocked = (path_facts.get("blocked") or {}).get("reason")
        if not path_facts.get("exists", False) and blocked not in hidden:
            return (f"{var}={directory!r}: has no {wanted} on {host}; copy {wanted} from the original model's "
                    "repository (TabbyAPI loads its tokenizer from it, and the draft/target vocabularies are "
                    "compared with it)")
        problem = _path_problem(var, path_facts, host)
        if problem:
            return problem
    return None


def check_host(facts: dict[str, Any], host: str, key_file: str, ports: dict[str, int],
               our_units: list[str]) -> list[str]:
    """Problems found on the host: ``facts`` from host_facts.py (``key_file``: stat and the shape of its lines;
    ``ports``: their owners; ``paths``: variable -> whether the service user can read that model)."""
    problems: list[str] = []
    if key_file:
        key = facts.get("key_file") or {}
        name = "llama_server_api_key_file"
        # a symlink: its stat is the target's (the link's own lrwxrwxrwx means nothing), so the problem says it is
        # one, names the target, and the fix acts on the target
        target = key.get("target") if key.get("symlink") is not None else None
        its = f"{key_file} (a symlink to {target}) is " if target else ""
        fix = target or key_file
        if not key.get("exists"):
            if target:
                problems.append(f"{name}={key_file!r}: {key_file} (a symlink to {target}) points to no file on "
                                f"{host}; create {target} (one key per line), then run: chown root:root {target} "
                                f"&& chmod 0600 {target}")
            else:
                problems.append(f"{name}={key_file!r}: no such file on {host}; create it there (one key per line), "
                                f"then run: chown root:root {key_file} && chmod 0600 {key_file}")
        elif not stat.S_ISREG(int(key.get("mode", 0))):
            kind = "a directory" if stat.S_ISDIR(int(key.get("mode", 0))) else "not a regular file"
            problems.append(f"{name}={key_file!r}: {its}{kind} on {host}; point it at the key file itself "
                            "(one key per line)")
        else:
            mode = int(key["mode"])
            if int(key.get("uid", -1)) != 0 or int(key.get("gid", -1)) != 0:
                problems.append(f"{name}={key_file!r}: {its}owned by uid {key.get('uid')} gid {key.get('gid')} on "
                                f"{host}, not root; run: chown root:root {fix}")
            if mode & 0o077:
                lets = (f"{its}mode {stat.S_IMODE(mode):04o} (the target's), which lets" if target
                        else f"mode {stat.S_IMODE(mode):04o} lets")
                problems.append(f"{name}={key_file!r}: {lets} group or others read the key on {host}; "
                                f"run: chmod 0600 {fix}")
            problems += _key_content_problems(name, key_file, host, key)
    owners = facts.get("ports") or {}
    for name, port in ports.items():
        owner = owners.get(str(port))
        if not owner:
            continue
        if owner.get("unit") in our_units:
            continue
        who = f"{owner.get('comm') or '?'} (pid {owner.get('pid', '?')}"
        who += f", {owner['unit']})" if owner.get("unit") else ")"
        problems.append(f"{name}={port}: port {port} is already taken on {host} by {who}; "
                        f"pick a free port or stop that process")
    for name, path_facts in (facts.get("paths") or {}).items():
        problem = _path_problem(name, path_facts, host)
        if problem:
            problems.append(problem)
    return problems


def _key_content_problems(name: str, key_file: str, host: str, key: dict[str, Any]) -> list[str]:
    """The key file's lines as llama-server reads them (host_facts.key_lines: a shape, never the key)."""
    lines: dict[str, Any] = key.get("content") or {}
    if key.get("size", 1) == 0 or lines.get("empty"):
        return [f"{name}={key_file!r}: empty on {host} (no key line: llama-server skips empty lines and lines "
                "starting with #, and with no key it serves without authentication); write the key into it "
                "(one per line)"]
    found: list[str] = []
    if lines.get("cr"):
        found.append(f"{name}={key_file!r}: has CR characters (Windows line endings) on {host}; llama-server splits "
                     "at LF only and would keep the CR in the key, which no client sends; "
                     f"run: sed -i 's/\\r//g' {key_file}")
    if lines.get("edge_whitespace"):
        found.append(f"{name}={key_file!r}: a key line starts or ends with a space or tab on {host}; llama-server "
                     "keeps it in the key (it strips nothing) and HTTP drops it from the Authorization header, so "
                     "no client can send that key; remove the spaces: "
                     f"sed -i 's/^[[:blank:]]*//; s/[[:blank:]]*$//' {key_file}")
    if lines.get("nonprintable"):
        found.append(f"{name}={key_file!r}: a key line holds a byte that is not printable ASCII (a control "
                     f"character, a tab, a byte-order mark or non-ASCII text) on {host}; write each key in printable "
                     "ASCII, one per line with LF line endings")
    return found


def _path_problem(name: str, facts: dict[str, Any], host: str) -> str | None:
    """One line when the service user cannot read a model file (host_facts.path_access)."""
    path = facts.get("path", "")
    head = f"{name}={path!r}"
    if facts.get("error"):
        return f"{head}: cannot be resolved on {host} ({facts['error']}); fix the path or its symlinks"
    blocked = facts.get("blocked")
    if not blocked:
        return None
    real, at, reason = facts.get("real", path), blocked.get("at", ""), blocked.get("reason")
    resolves = f"resolves to {real}, and " if real != path else ""
    if reason in ("protect-home", "private-tmp"):
        top = "/run/user" if at.startswith("/run/user") else "/" + at.strip("/").split("/")[0]
        if top == "/var":
            top = "/var/tmp"
        why = ("ProtectHome=yes hides /home, /root and /run/user from it" if reason == "protect-home"
               else "PrivateTmp=yes gives it an empty /tmp and /var/tmp of its own")
        where = f"resolves to {real}, under {top}" if real != path else f"is under {top}"
        return (f"{head}: {where}, which the service cannot see on {host} ({why}); move the model to a "
                "world-readable directory outside /home, /root, /run/user, /tmp and /var/tmp (e.g. /srv)")
    if reason in ("directory", "not-a-file"):
        kind = "a directory" if reason == "directory" else "not a regular file"
        return f"{head}: {resolves}{real} is {kind} on {host}; point it at the model file (.gguf) itself"
    mode, owner, bits = int(blocked.get("mode", 0)), blocked.get("owner", "?"), blocked.get("need", "x")
    who = "g" if blocked.get("class") == "group" else "o"
    if not facts.get("exists", True):
        return (f"{head}: {resolves}{at} (mode {mode:04o}, owner {owner}) would not let {SERVICE_USER} through to "
                f"the model, which is not there yet, on {host}; put the model under a world-readable directory or "
                f"run: chmod {who}+x {at}")
    if at == real:
        return (f"{head}: {resolves}{at} (mode {mode:04o}, owner {owner}) is not readable by {SERVICE_USER} "
                f"on {host}; run: chmod {who}+{bits} {at}")
    return (f"{head}: {resolves}{at} (mode {mode:04o}, owner {owner}) does not let {SERVICE_USER} through on "
            f"{host}; move the model under a world-readable directory or run: chmod {who}+x {at}")


def verify_problems(results: list[dict[str, Any]], units: list[str], binary: str = "",
                    binary_installed: bool = True) -> list[str]:
    """One line per unit that ``systemd-analyze verify`` did not accept (``results``: one registered command
    result per path in ``units``). Before the build is installed on the host, its binary's absence is expected
    and is the one complaint let through."""
    problems: list[str] = []
    for path, result in zip(units, results, strict=False):
        base = path.rsplit("/", 1)[-1]
        lines = [line for line in str(result.get("stderr", "")).splitlines() if base in line]
        if binary and not binary_installed:
            lines = [line for line in lines if f"Command {binary} is not executable" not in line]
        if lines:
            problems.append(f"the rendered unit {base} does not verify ({lines[0].strip()}); nothing was installed")
        elif int(result.get("rc", 0)) != 0 and (binary_installed or not binary):
            problems.append(f"the rendered unit {base} does not verify (systemd-analyze exit {result.get('rc')}); "
                            "nothing was installed")
    return problems
