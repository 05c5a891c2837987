"""Deploy inputs, checked before anything on a host changes: one line per problem, naming the variable,
its value and the fix.

Types and choices come from the role's ``meta/argument_specs.yml`` (the one declaration); ranges, paths and
what a systemd unit can hold are checked here; the host's side (the API key file and its lines, the ports, whether
the service user can read the models) from what ``specops.host.host_facts`` reports on the host.
Both engines go through the same checks: ``check_inputs``/``check_host`` for llama-server,
``check_tabbyapi_inputs``/``check_tabbyapi_host`` for TabbyAPI (the same type, range, path and unit rules, plus
what only TabbyAPI has: its state directory, its api_tokens.yml, its model directories).
"""

from __future__ import annotations

import ipaddress
import re
import stat
from typing import Any

from specops.devices import placement_problem
from specops.knobs import (
    DRAFT_MODEL_TYPES,
    KNOBS,
    PLACEMENT,
    knob,
    spec_type_members,
    spec_type_problem,
    uses_draft_model,
)
from specops.knobs import ranges as knob_ranges
from specops.profile import no_draft_why
from specops.tune import settings as tune_settings
from specops.unitfile import UnitValueError, absolute_path, executable, memory_size, plain_name, representable

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
_TRUE = {"true", "yes", "on", "1", "y", "t"}
_FALSE = {"false", "no", "off", "0", "n", "f"}

# lowest allowed value (and highest, when there is one) of the numeric settings: the llama-server settings'
# from the knob table (each knob's low/high), the tune's from the tune settings table, the role's other settings
# and TabbyAPI's here
RANGES: dict[str, tuple[float | None, float | None]] = {
    **{knob(name).role_var: bounds for name, bounds in knob_ranges().items() if knob(name).role},
    **tune_settings.ranges(),
    "llama_server_baseline_port": knob("port").low_high,
    "llama_server_health_timeout": (1, None),
    "llama_server_busy_probe_timeout": (1, None),
    "llama_server_probe_tokens": (1, None),
    "llama_server_restart_sec": (0, None),
    "llama_server_start_limit_burst": (1, None),
    "llama_server_speed_gate_tokens": (16, None),
    "llama_server_speed_gate_idle_timeout": (1, None),
    "llama_server_speed_gate_max_spread": (1, None),
    "llama_server_drain_timeout": (0, None),
    "llama_server_disk_margin_mib": (0, None),
    "llama_server_stop_timeout": (1, None),
    "tabbyapi_port": (1, 65535),
    "tabbyapi_ctx_size": (1, None),
    "tabbyapi_parallel": (1, None),
    "tabbyapi_draft_n_max": (1, None),
    "tabbyapi_ngram_match_min": (1, None),
    "tabbyapi_chunk_size": (1, None),
    "tabbyapi_restart_sec": (0, None),
    "tabbyapi_stop_timeout": (1, None),
    "tabbyapi_health_timeout": (1, None),
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
    "llama_server_tune_install_dir": False,
    "llama_server_tune_python": False,
    "tabbyapi_models_dir": False,
    "tabbyapi_target_model": False,
    "tabbyapi_draft_model": True,
    "tabbyapi_api_tokens_file": False,
    "tabbyapi_install_dir": False,
    "tabbyapi_config_dir": False,
    "tabbyapi_state_dir": False,
}
# roots of an executable's path (ExecStart's first word: no quotes or backslashes)
EXECUTABLE_ROOTS = ("llama_server_install_root", "tabbyapi_install_dir")
# MemoryMax=-style sizes ("" = none)
SIZES = ("llama_server_memory_max", "tabbyapi_memory_max")
# text that reaches a unit line
TEXT = ("llama_server_service_name", "llama_server_baseline_service_name", "llama_server_alias",
        "llama_server_host", "tabbyapi_service_name", "tabbyapi_host", "tabbyapi_cache_mode",
        "tabbyapi_draft_cache_mode")
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@-]+\Z")
PORTS = ("llama_server_port", "llama_server_baseline_port")
# settings whose value is a comma-separated list of their choices (the spec type): checked member by member here,
# their argument specs carry no choices
LISTED = {k.role_var for k in KNOBS if k.listed}
SPEC_TYPE_VAR = knob("spec_type").role_var
# where a deploy's draft model is named: the models role's entry (the root), then the service's path
DRAFT_VARS = ("specops_models_draft", "llama_server_draft_model")
SERVICE_USER = "the service user (systemd DynamicUser)"


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in _TRUE)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reachable from this host only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _exposure_problems(values: dict[str, Any], problems: list[str]) -> list[str]:
    """A listen address beyond loopback without a key; a port below 1024 without CAP_NET_BIND_SERVICE. Only for
    values that passed their type checks (``problems`` so far): one line per input."""
    found: list[str] = []
    reported = {p.split("=", 1)[0] for p in problems}
    host = values.get("llama_server_host")
    if (isinstance(host, str) and host and "llama_server_host" not in reported and not is_loopback(host)
            and not values.get("llama_server_api_key_file")
            and not _true(values.get("llama_server_allow_public_unauthenticated"))):
        found.append(f"llama_server_host={host!r}: listens beyond loopback and no llama_server_api_key_file is set, "
                     "so anyone who reaches the port can use the model; set llama_server_api_key_file (a root-only "
                     "file, one key per line), listen on 127.0.0.1 behind a proxy, or set "
                     "llama_server_allow_public_unauthenticated: true to accept that")
    if _true(values.get("llama_server_bind_privileged_port")):
        return found
    for name in PORTS:
        port = values.get(name)
        if name in reported or port is None or isinstance(port, bool) or not _INT.match(str(port).strip()):
            continue
        if int(port) < 1024:
            found.append(f"{name}={port!r}: below 1024, and {SERVICE_USER} has no capability to bind it "
                         f"(llama-server would fail with permission denied); pick a port of 1024 or more (e.g. "
                         f"{8080 if name == 'llama_server_port' else 8081}) or set "
                         "llama_server_bind_privileged_port: true (grants the unit CAP_NET_BIND_SERVICE)")
    return found


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
        if spec.get("elements") in ("int", "float"):
            for item in value:
                number = _number(name, item, spec["elements"])
                if isinstance(number, str) or number < 0:
                    return f"{name}={value!r}: every element must be a number of 0 or more (e.g. {name}: [20, 24])"
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
    if name in LISTED:
        return None         # each member against the table: _speculation_problems
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
            if name in EXECUTABLE_ROOTS:
                executable(value, name)
            elif name in SIZES and value not in ("", None):
                memory_size(value, name)
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
    for env_name in ("llama_server_environment", "tabbyapi_environment"):
        problems += _environment_problems(env_name, values.get(env_name))
    for i, arg in enumerate(values.get("llama_server_extra_args") or []):
        if isinstance(arg, str):
            try:
                representable(arg, f"llama_server_extra_args[{i}]")
            except UnitValueError as exc:
                problems.append(str(exc))
    return (problems + _speculation_problems(values, problems) + _placement_problems(values, problems)
            + _exposure_problems(values, problems))


# the placement settings' role variables -> knob names
PLACEMENT_VARS = {knob(name).role_var: name for name in PLACEMENT}


def _placement_problems(values: dict[str, Any], problems: list[str]) -> list[str]:
    """The placement settings on their own (a split's parts, one per named device; device names; the main GPU's
    index among them): one line naming the variable. The devices of the host's build are checked by the memory fit,
    which sees them (specops fit, per device)."""
    reported = {p.split("=", 1)[0].split(":", 1)[0] for p in problems}
    if not set(PLACEMENT_VARS) & set(values) or set(PLACEMENT_VARS) & reported:
        return []
    problem = placement_problem({name: values.get(var) for var, name in PLACEMENT_VARS.items()},
                                var=lambda name: knob(name).role_var)
    return [problem] if problem else []


def _speculation_problems(values: dict[str, Any], problems: list[str]) -> list[str]:
    """The spec type (one type or a comma-separated list, each member a known type) and its draft model: a draft
    named for a type that loads none (n-gram types, draft-mtp, default, none: llama-server would load it and never
    use it), no draft for a type that drafts with one. One line, naming the variable to change."""
    reported = {p.split("=", 1)[0].split(":", 1)[0] for p in problems}
    spec = values.get(SPEC_TYPE_VAR)
    if SPEC_TYPE_VAR not in values or spec is None or SPEC_TYPE_VAR in reported:
        return []
    problem = spec_type_problem(spec)
    if problem:
        return [f"{SPEC_TYPE_VAR}={spec!r}: {problem}; pick one of those, or list speculative types with commas "
                f"(e.g. {SPEC_TYPE_VAR}: draft-mtp,ngram-mod)"]
    if not uses_draft_model(spec):
        for name in DRAFT_VARS:
            draft = values.get(name)
            if isinstance(draft, str) and draft.strip() and name not in reported:
                also = " and drop its entry from specops_models" if name == "specops_models_draft" else ""
                return [f"{name}={draft!r}: a draft model, but {SPEC_TYPE_VAR}={spec!r} loads none "
                        f"({no_draft_why(spec)}), so llama-server would load it and never use it; "
                        f"set {name}: \"\"{also}, or a {SPEC_TYPE_VAR} that drafts with a model "
                        f"({', '.join(DRAFT_MODEL_TYPES[:2])})"]
        return []
    with_model = [m for m in spec_type_members(spec) if m in DRAFT_MODEL_TYPES]
    draft = values.get("llama_server_draft_model")
    if with_model and "llama_server_draft_model" in values and not (isinstance(draft, str) and draft.strip()) \
            and "llama_server_draft_model" not in reported:
        return [f"{SPEC_TYPE_VAR}={spec!r}: {with_model[0]} drafts with a separate draft model and none is set; set "
                "specops_models_draft to the draft's entry in specops_models (or llama_server_draft_model to its "
                f"path), or a {SPEC_TYPE_VAR} that needs none (an n-gram type such as ngram-mod, or draft-mtp)"]
    return []


def _environment_problems(name: str, env: Any) -> list[str]:
    """An ``Environment=`` mapping: variable names, and values a unit line can hold."""
    found: list[str] = []
    for key, val in env.items() if isinstance(env, dict) else []:
        try:
            representable(str(key), name)
            if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", str(key)):
                raise UnitValueError(f"{name}: {key!r} is not an environment variable name "
                                     "(letters, digits, _; not starting with a digit)")
            representable(val if isinstance(val, str) else str(val), f"{name}.{key}")
        except UnitValueError as exc:
            found.append(str(exc))
    return found


TABBY_UNIT_STATE_ROOT = "/var/lib/"


def check_tabbyapi_inputs(values: dict[str, Any], specs: dict[str, Any]) -> list[str]:
    """roles/tabbyapi's settings: everything ``check_inputs`` checks (types and choices from its argument specs,
    ranges, absolute paths a unit can hold, sizes, environment), plus what its unit needs: a unit name, a state
    directory systemd creates (``StateDirectory=`` is a name under /var/lib), a port the capability-less service
    can bind, a draft only with a speculative type that uses one. [] when all is well."""
    problems = check_inputs(values, specs)
    reported = {p.split("=", 1)[0].split(":", 1)[0] for p in problems}
    unit = values.get("tabbyapi_service_name")
    if isinstance(unit, str) and unit and "tabbyapi_service_name" not in reported and not _UNIT_NAME.match(unit):
        problems.append(f"tabbyapi_service_name={unit!r}: not a systemd unit name; use letters, digits and : _ . @ -")
    state = values.get("tabbyapi_state_dir")
    if isinstance(state, str) and state and "tabbyapi_state_dir" not in reported:
        rest = state[len(TABBY_UNIT_STATE_ROOT):].rstrip("/") if state.startswith(TABBY_UNIT_STATE_ROOT) else ""
        try:
            if not rest or "/" in rest:
                raise UnitValueError(f"tabbyapi_state_dir={state!r}: must be a directory directly under /var/lib "
                                     "(the unit's StateDirectory=, the only place the service may write); "
                                     "e.g. /var/lib/tabbyapi")
            plain_name(rest, "tabbyapi_state_dir")
        except UnitValueError as exc:
            problems.append(str(exc))
    port = values.get("tabbyapi_port")
    if ("tabbyapi_port" not in reported and port is not None and not isinstance(port, bool)
            and _INT.match(str(port).strip()) and int(port) < 1024):
        problems.append(f"tabbyapi_port={port!r}: below 1024, and {SERVICE_USER} has no capability to bind it "
                        "(TabbyAPI would move to the next port); pick a port of 1024 or more (e.g. 5000)")
    draft, spec_type = values.get("tabbyapi_draft_model"), values.get("tabbyapi_spec_type")
    if draft and spec_type in ("none", "ngram-simple") and "tabbyapi_draft_model" not in reported:
        problems.append(f"tabbyapi_draft_model={draft!r}: set, but tabbyapi_spec_type={spec_type!r} does not use a "
                        "draft (TabbyAPI would load it for nothing); set tabbyapi_draft_model: \"\" or "
                        "tabbyapi_spec_type: auto")
    if spec_type == "draft-simple" and not draft and "tabbyapi_spec_type" not in reported:
        problems.append("tabbyapi_spec_type='draft-simple': needs tabbyapi_draft_model (the draft's model "
                        "directory); set it or use tabbyapi_spec_type: auto")
    return problems


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
