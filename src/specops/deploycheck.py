"""Deploy inputs, checked before anything on a host changes: one line per problem, naming the variable,
its value and the fix.

Types and choices come from the role's ``meta/argument_specs.yml`` (the one declaration); ranges, paths and
what a systemd unit can hold are checked here; the host's side (the API key file and its lines, the ports, whether
the service user can read the models) from what ``specops.host.host_facts`` reports on the host.
Both engines go through the same checks: ``check_inputs``/``check_host`` for llama-server,
``check_tabbyapi_inputs``/``check_tabbyapi_host`` for TabbyAPI (the same type, range, path and unit rules, plus
what only TabbyAPI has: its state directory, its api_tokens.yml, its model directories). The host's side
(``check_host``, ``check_tabbyapi_host``, ``verify_problems``) is :mod:`specops.hostcheck`'s, importable from here.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from specops.devices import placement_problem
from specops.hostcheck import SERVICE_USER, check_host, check_tabbyapi_host, verify_problems
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
from specops.rpc import REMOTE_VAR as RPC_REMOTE_VAR
from specops.rpc import rpc_problem
from specops.tune import settings as tune_settings
from specops.unitfile import UnitValueError, absolute_path, executable, memory_size, plain_name, representable

__all__ = [
    "BUILD_RPC", "DRAFT_VARS", "EXECUTABLE_ROOTS", "LISTED", "PATHS", "PLACEMENT_VARS", "PORTS", "RANGES",
    "RPC_REMOTE_VAR", "RPC_VAR", "SERVICE_USER",
    "SIZES", "SPEC_TYPE_VAR", "TABBY_UNIT_STATE_ROOT", "TEXT", "check_host", "check_inputs", "check_tabbyapi_host",
    "check_tabbyapi_inputs", "is_loopback", "truthy", "verify_problems"
]

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


def truthy(value: Any) -> bool:
    """An Ansible boolean as the roles hand it over (True, or its text: true, yes, on, 1, y, t)."""
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
            and not truthy(values.get("llama_server_allow_public_unauthenticated"))):
        found.append(f"llama_server_host={host!r}: listens beyond loopback and no llama_server_api_key_file is set, "
                     "so anyone who reaches the port can use the model; set llama_server_api_key_file (a root-only "
                     "file, one key per line), listen on 127.0.0.1 behind a proxy, or set "
                     "llama_server_allow_public_unauthenticated: true to accept that")
    if truthy(values.get("llama_server_bind_privileged_port")):
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
            + _exposure_problems(values, problems) + _rpc_problems(values, problems))


RPC_VAR = knob("rpc").role_var
# whether the builder's llama.cpp has the RPC backend (its llama_cpp_rpc, or GGML_RPC=ON among its extra options):
# roles/llama_server/tasks/inputs.yml hands it in under this name where the inventory has a builder
BUILD_RPC = "llama_cpp_rpc"


def _rpc_problems(values: dict[str, Any], problems: list[str]) -> list[str]:
    """The ggml-rpc-server endpoints (specops.rpc: host:port, each once, loopback unless llama_server_rpc_remote),
    and a build that has no RPC backend to reach them with. One line, naming the variable."""
    reported = {p.split("=", 1)[0] for p in problems}
    value = values.get(RPC_VAR)
    if value is None or value == "" or RPC_VAR in reported or RPC_REMOTE_VAR in reported:
        return []
    problem = rpc_problem(value, allow_remote=truthy(values.get(RPC_REMOTE_VAR)), var=lambda name: knob(name).role_var)
    if problem:
        return [problem]
    if BUILD_RPC in values and not truthy(values.get(BUILD_RPC)):
        return [f"{RPC_VAR}={value!r}: the builder's llama.cpp has no RPC backend ({BUILD_RPC} is false), so "
                "llama-server would stop with \"RPC not supported in this build\"; set llama_cpp_rpc: true for the "
                f"llama_builders host (it also builds ggml-rpc-server), or unset {RPC_VAR}"]
    return []


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

