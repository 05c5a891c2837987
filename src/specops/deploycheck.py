"""Deploy inputs, checked before anything on a host changes: one line per problem, naming the variable,
its value and the fix.

Types and choices come from the role's ``meta/argument_specs.yml`` (the one declaration); ranges, paths and
what a systemd unit can hold are checked here; the host's side (the API key file, the ports) from what
``roles/llama_server/files/host_facts.py`` reports.
"""

from __future__ import annotations

import re
import stat
from typing import Any

from specops.unitfile import UnitValueError, absolute_path, executable, representable

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}

# lowest allowed value (and highest, when there is one) of the numeric settings
RANGES: dict[str, tuple[float, float | None]] = {
    "llama_server_port": (1, 65535),
    "llama_server_baseline_port": (1, 65535),
    "llama_server_parallel": (1, None),
    "llama_server_ctx_size": (0, None),
    "llama_server_draft_n_max": (0, None),
    "llama_server_draft_n_min": (0, None),
    "llama_server_draft_p_min": (0, 1),
    "llama_server_draft_threads": (1, None),
    "llama_server_threads": (1, None),
    "llama_server_threads_batch": (1, None),
    "llama_server_ngram_size_n": (1, None),
    "llama_server_ngram_size_m": (1, None),
    "llama_server_ngram_min_hits": (1, None),
    "llama_server_cache_ram_mib": (-1, None),
    "llama_server_health_timeout": (1, None),
    "llama_server_busy_probe_timeout": (1, None),
    "llama_server_probe_tokens": (1, None),
    "llama_server_restart_sec": (0, None),
    "llama_server_start_limit_burst": (1, None),
    "llama_server_speed_gate_tokens": (16, None),
    "llama_server_speed_gate_idle_timeout": (1, None),
    "llama_server_speed_gate_max_spread": (1, None),
    "llama_server_drain_timeout": (0, None),
    "llama_server_stop_timeout": (1, None),
}

# paths that reach a unit file or the host: absolute and representable ("" = not set, where allowed)
PATHS: dict[str, bool] = {  # name -> may be empty
    "specops_models_dir": False,
    "llama_server_models_dir": False,
    "llama_server_target_model": False,
    "llama_server_draft_model": True,
    "llama_server_api_key_file": True,
    "llama_server_install_root": False,
    "llama_server_state_dir": False,
}
# text that reaches a unit line
TEXT = ("llama_server_service_name", "llama_server_baseline_service_name", "llama_server_alias",
        "llama_server_host", "llama_server_memory_max")
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@-]+\Z")


def _number(name: str, value: Any, kind: str, example: Any = None) -> float | int | str:
    """The number ``value`` stands for, or a problem line (str)."""
    if isinstance(value, bool):
        return f"{name}={value!r}: a boolean where {kind} belongs; set a number"
    if kind == "int":
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INT.match(value.strip()):
            return int(value)
        return f"{name}={value!r}: not a whole number; set an integer (e.g. {name}: {example or 2})"
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    return f"{name}={value!r}: not a number; set a number (e.g. {name}: {example or 0.5})"


def _type_problem(name: str, value: Any, spec: dict[str, Any]) -> str | None:
    kind = spec.get("type", "str")
    if value is None:
        return f"{name} is required" if spec.get("required") else None
    if kind in ("int", "float"):
        number = _number(name, value, kind, spec.get("default"))
        if isinstance(number, str):
            return number
        low, high = RANGES.get(name, (None, None))
        if low is not None and number < low:
            return f"{name}={value!r}: must be at least {low:g}; set {name} to {low:g} or more"
        if high is not None and number > high:
            return f"{name}={value!r}: must be at most {high:g}; set {name} to {high:g} or less"
        return None
    if kind == "bool":
        if isinstance(value, bool) or str(value).strip().lower() in _TRUE | _FALSE:
            return None
        return f"{name}={value!r}: not a boolean; set true or false"
    if kind == "list":
        if not isinstance(value, list):
            return f"{name}={value!r}: not a list; write a YAML list (e.g. {name}: [])"
        if spec.get("elements") == "str" and not all(isinstance(v, str) for v in value):
            return f"{name}={value!r}: every element must be a string; quote them"
        return None
    if kind == "dict":
        return None if isinstance(value, dict) else f"{name}={value!r}: not a mapping; write a YAML mapping"
    if kind == "str":
        choices = spec.get("choices")
        if isinstance(value, bool) and choices and ("off" in choices or "on" in choices):
            return f"{name}={value!r}: YAML read on/off as a boolean; quote it ({name}: \"off\")"
        if isinstance(value, (dict, list)):
            return f"{name}={value!r}: not a string"
    return None


def _choice_problem(name: str, value: Any, spec: dict[str, Any]) -> str | None:
    choices = spec.get("choices")
    if not choices or value is None or (value == "" and not spec.get("required")):
        return None
    if str(value) in [str(c) for c in choices if c is not None]:
        return None
    return f"{name}={value!r}: not one of {', '.join(str(c) for c in choices if c is not None)}; pick one of those"


def check_inputs(values: dict[str, Any], specs: dict[str, Any]) -> list[str]:
    """Problems with the role's settings (``values``: name -> value) against ``specs`` (the options of an
    argument_specs entry point), the ranges, the paths and what a unit can hold. [] when all is well."""
    problems: list[str] = []
    refused_paths: list[str] = []
    # the roots first: a model path made from a refused directory is not reported again
    order = [n for n in PATHS if n in values] + sorted(n for n in values if n not in PATHS)
    for name in order:
        value, spec = values[name], specs.get(name, {})
        problem = _type_problem(name, value, spec) or _choice_problem(name, value, spec)
        if problem:
            problems.append(problem)
            continue
        if name in PATHS and isinstance(value, str) and any(value.startswith(p) for p in refused_paths):
            continue
        try:
            if name == "llama_server_install_root":
                executable(value, name)
            elif name in PATHS and not (PATHS[name] and value in ("", None)):
                absolute_path(value, name)
            elif name in TEXT and value not in ("", None):
                representable(str(value), name)
        except UnitValueError as exc:
            problems.append(str(exc))
            if name in PATHS and isinstance(value, str) and value:
                refused_paths.append(value)
    for name in ("llama_server_service_name", "llama_server_baseline_service_name"):
        unit = values.get(name)
        if isinstance(unit, str) and unit and not _UNIT_NAME.match(unit):
            problems.append(f"{name}={unit!r}: not a systemd unit name; use letters, digits and : _ . @ -")
    ports = [values.get("llama_server_port"), values.get("llama_server_baseline_port")]
    if ports[0] is not None and str(ports[0]) == str(ports[1]):
        problems.append(f"llama_server_baseline_port={ports[1]!r}: the same as llama_server_port; "
                        "give the baseline unit its own port")
    for key, val in (values.get("llama_server_environment") or {}).items() if isinstance(
            values.get("llama_server_environment"), dict) else []:
        try:
            representable(str(key), "llama_server_environment")
            if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", str(key)):
                raise UnitValueError(f"llama_server_environment: {key!r} is not an environment variable name "
                                     "(letters, digits, _; not starting with a digit)")
            representable(val if isinstance(val, str) else str(val), f"llama_server_environment.{key}")
        except UnitValueError as exc:
            problems.append(str(exc))
    for i, arg in enumerate(values.get("llama_server_extra_args") or []):
        if isinstance(arg, str):
            try:
                representable(arg, f"llama_server_extra_args[{i}]")
            except UnitValueError as exc:
                problems.append(str(exc))
    return problems


def check_host(facts: dict[str, Any], host: str, key_file: str, ports: dict[str, int],
               our_units: list[str]) -> list[str]:
    """Problems found on the host: ``facts`` from host_facts.py (``key_file`` stat, port owners)."""
    problems: list[str] = []
    if key_file:
        key = facts.get("key_file") or {}
        name = "llama_server_api_key_file"
        if not key.get("exists"):
            problems.append(f"{name}={key_file!r}: no such file on {host}; create it there (one key per line), "
                            f"then run: chown root:root {key_file} && chmod 0600 {key_file}")
        elif not stat.S_ISREG(int(key.get("mode", 0))):
            kind = "a directory" if stat.S_ISDIR(int(key.get("mode", 0))) else "not a regular file"
            problems.append(f"{name}={key_file!r}: {kind} on {host}; point it at the key file itself "
                            "(one key per line)")
        else:
            mode = int(key["mode"])
            if int(key.get("uid", -1)) != 0 or int(key.get("gid", -1)) != 0:
                problems.append(f"{name}={key_file!r}: owned by uid {key.get('uid')} gid {key.get('gid')} on "
                                f"{host}, not root; run: chown root:root {key_file}")
            if mode & 0o077:
                problems.append(f"{name}={key_file!r}: mode {stat.S_IMODE(mode):04o} lets group or others read "
                                f"the key on {host}; run: chmod 0600 {key_file}")
            if key.get("size", 1) == 0:
                problems.append(f"{name}={key_file!r}: empty on {host}; write the key into it (one per line)")
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
    return problems


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
