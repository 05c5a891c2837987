"""Ansible filters backed by the specops package: the roles never spell llama-server flags or
CMake options themselves, they ask the same Python functions the CLI, bench and soak use.

Ansible forks a worker per task and host, and a worker loads every legacy filter file the first time it looks up
any filter or test by its short name: this file is imported once per *task*. Its module-level imports stay light
(argv, knobs, unit escaping); modules that pull in httpx, gguf or numpy are imported inside the one filter that
needs them (with the CLI's own lazy command imports, the no-op deploy went from 20.7 s to 16.7-17.5 s on the
2-core lab machine). tests/unit/test_import_weight.py keeps it so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    import specops  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.errors import AnsibleFilterError

from specops.argv import FlagError, build_argv, setting_in, spec_type_of
from specops.buildopts import (
    DEFAULT_CUDA_ARCHITECTURES,
    DEFAULT_HIP_TARGETS,
    BuildOptionError,
    build_id,
    cmake_args,
    cmake_options,
    compile_argv,
    configure_argv,
)
from specops.capabilities import Capabilities, parse_help, parse_version
from specops.deploycheck import check_host, check_inputs, is_loopback, verify_problems
from specops.devices import device_problem, devices_argv
from specops.knobs import KNOBS, knob, uses_draft_model
from specops.profile import ProfileError, ServerProfile, models_wanted
from specops.unitfile import (
    UnitValueError,
    address_prefix,
    cpu_quota,
    credential,
    env_assignment,
    exec_line,
    line_value,
    memory_size,
    path_list,
    plain_name,
)


def specops_capabilities(help_text: str, version_text: str = "") -> dict:
    return parse_version(version_text or "", parse_help(help_text)).to_dict()


def specops_argv(profile: dict, capabilities: dict, binary: str = "llama-server") -> list[str]:
    try:
        return build_argv(ServerProfile.from_dict(dict(profile)), Capabilities.from_dict(dict(capabilities)),
                          binary=binary)
    except (ProfileError, FlagError) as exc:
        raise AnsibleFilterError(f"llama-server arguments: {exc}") from exc


def specops_argv_spec_type(argv: list[str], draft_model: Any = None) -> str:
    """The speculative type a rendered llama-server argv runs (its spec type, default for llama.cpp's own config,
    draft-simple on a build without spec types when there is a draft model, else none): specops.argv.spec_type_of."""
    return spec_type_of([str(a) for a in argv or []], draft_model)


def specops_argv_setting(argv: list[str], name: str, default: Any = None) -> Any:
    """The value llama-server setting ``name`` (a knob) has on the command line ``argv``, else ``default``."""
    return setting_in([str(a) for a in argv or []], str(name), default)


def specops_devices_argv(binary: str) -> list[str]:
    """``llama-server --list-devices``'s argv for ``binary``: specops.devices.devices_argv."""
    return devices_argv(str(binary))


def _unit(func, *args, **kwargs) -> str:
    try:
        return func(*args, **kwargs)
    except UnitValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def specops_systemd_exec(argv: list[str] | str, multiline: bool = False, verbatim: list[str] | None = None,
                         what: str = "llama-server argument") -> str:
    """argv for ExecStart= (quoted, % and $ escaped; control characters refused)."""
    return _unit(exec_line, [argv] if isinstance(argv, str) else [str(a) for a in argv], multiline,
                 tuple(verbatim or ()), what)


def specops_systemd_paths(paths: list[str] | str, what: str = "path") -> str:
    """Absolute paths for ReadOnlyPaths=/ReadWritePaths=."""
    return _unit(path_list, paths, what)


def specops_systemd_env(env: dict, what: str = "environment") -> list[str]:
    """One quoted "KEY=value" word per entry of ``env`` (sorted by key), for Environment= lines."""
    return [_unit(env_assignment, str(k), v, what) for k, v in sorted(dict(env).items())]


def specops_systemd_line(value: str, what: str = "value") -> str:
    """A rest-of-line value (Description=, WorkingDirectory=): % escaped, what a unit cannot hold refused."""
    return _unit(line_value, value, what)


def specops_systemd_credential(path: str, name: str, what: str = "credential") -> str:
    """NAME:PATH for LoadCredential=."""
    return _unit(credential, name, path, what)


def specops_systemd_name(value: str, what: str = "name") -> str:
    """A single plain word (StateDirectory= name): letters, digits and _ . - @ only, anything else refused."""
    return _unit(plain_name, value, what)


def specops_systemd_size(value: str, what: str = "size") -> str:
    """A MemoryMax=-style size (20G, 512M, 80%, infinity); anything else refused."""
    return _unit(memory_size, value, what)


def specops_systemd_cpu_quota(value: str, what: str = "cpu quota") -> str:
    """A CPUQuota= percentage; anything else refused."""
    return _unit(cpu_quota, value, what)


def specops_systemd_address(value: str, what: str = "address") -> str:
    """One IPAddressAllow= entry (an address, a prefix or a systemd keyword); anything else refused."""
    return _unit(address_prefix, value, what)


def specops_input_problems(values: dict, specs: dict) -> list[str]:
    """One line per setting that is wrong (type, choice, range, path, unit-representable); [] when all is well."""
    return check_inputs(dict(values), dict(specs))


def specops_host_problems(facts: dict, host: str, key_file: str, ports: dict, our_units: list[str]) -> list[str]:
    """One line per problem on the host: the API key file (present, a file, root-owned, 0600, its lines as
    llama-server reads them), the ports, and whether the service user can read the models."""
    return check_host(dict(facts), host, str(key_file or ""), {k: int(v) for k, v in dict(ports).items()},
                      list(our_units))


def specops_uses_draft_model(spec_type: Any) -> bool:
    """Does a server of this spec type (one type or a comma-separated list) load a separate draft model? The one
    rule (specops.knobs.uses_draft_model) the models role (which draft to fetch, check, install) and the service role
    (the unit's draft, the host's checks) follow: auto and the draft-model types yes; none, default, the n-gram
    types and draft-mtp no."""
    return uses_draft_model(spec_type)


def specops_models_wanted(models: list, target: str, draft: str, spec_type: Any) -> list:
    """The entries of specops_models this deploy fetches and installs: the draft's left out where the spec type
    loads no draft model (unless it is the target too)."""
    return models_wanted([dict(m) for m in models or []], str(target or ""), str(draft or ""), spec_type)


def specops_knob_flags(name: str) -> list[str]:
    """Every spelling of one llama-server setting (the knob table), for host scripts that read a command line."""
    return list(knob(name).own_spellings)


def specops_is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    return is_loopback(str(host))


def specops_verify_problems(result: dict, units: list[str], binary: str = "",
                            binary_installed: bool = True) -> list[str]:
    """One line per unit that `systemd-analyze verify` (a registered loop result) did not accept."""
    return verify_problems(list(result.get("results", [result])), list(units), binary, bool(binary_installed))


def specops_cmake_options(backend: str, commit: str, cpu_flags: str | list[str] = "", cpu_isa="auto",
                          cuda_architectures: str = DEFAULT_CUDA_ARCHITECTURES, hip_targets: str = DEFAULT_HIP_TARGETS,
                          extra: dict | None = None) -> dict:
    try:
        return cmake_options(backend, commit=commit, cpu_flags=cpu_flags, cpu_isa=cpu_isa,
                             cuda_architectures=str(cuda_architectures), hip_targets=str(hip_targets),
                             extra=dict(extra or {}))
    except BuildOptionError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def specops_build_id(options: dict, commit: str, backend: str, targets: list[str]) -> str:
    return build_id(commit, backend, dict(options), list(targets))


def specops_cmake_args(options: dict) -> list[str]:
    return cmake_args(dict(options))


def specops_configure_argv(src_dir: str, build_dir: str, options: dict, backend: str, cuda_home: str | None = None,
                           ccache: bool = False, cuda_library_dirs: list[str] | None = None,
                           cuda_include_dirs: list[str] | None = None, bundle_libs: bool = False) -> list[str]:
    """The cmake configure argv, the same function `specops build` uses (nvcc is looked for on the controller,
    as the `is exists` test the role used before did)."""
    return configure_argv(str(src_dir), str(build_dir), dict(options), backend=str(backend),
                          cuda_home=None if cuda_home is None else str(cuda_home), ccache=bool(ccache),
                          cuda_library_dirs=[str(d) for d in cuda_library_dirs or []],
                          cuda_include_dirs=[str(d) for d in cuda_include_dirs or []], bundle_libs=bool(bundle_libs))


def specops_compile_argv(build_dir: str, targets: list[str], jobs: int | str) -> list[str]:
    try:
        return compile_argv(str(build_dir), [str(t) for t in targets], jobs)
    except BuildOptionError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def specops_model_file(name: str, models: list | None = None) -> str:
    """The file name a model entry (by name or catalog name) is stored under on the hosts."""
    for entry in models or []:
        if name in (entry.get("name"), entry.get("catalog")):
            if entry.get("file"):
                return str(entry["file"])
            name = entry.get("catalog") or name
            break
    from specops.fetch import catalog  # imported on use: the model catalog pulls in httpx and gguf (~0.15 s)

    known = catalog()
    if name not in known:
        raise AnsibleFilterError(f"model {name!r} is neither in specops_models nor in the catalog ({', '.join(known)})")
    return known[name].file


def specops_device_problem(run: dict, backend: str) -> str:
    """'' when a registered ``llama-server --list-devices`` result shows a device of ``backend``, else why not."""
    output = str(run.get("stdout", "")) + "\n" + str(run.get("stderr", ""))
    return device_problem(backend, output, int(run.get("rc", 0)))


def specops_speed_gate(spec_probe: dict, plain_probe: dict, spec_url: str, plain_url: str, min_ratio: float = 1.0,
                       action: str = "fallback", service: str = "the service", draft_n_max: int | None = None,
                       mode: str = "side by side", parallel: int | None = None, max_spread: float = 1.5,
                       saturation: dict | None = None) -> dict:
    """Judge the speed probes: ratio, interval, verdict (pays | loses | unproven), the line to print, the
    break-even."""
    from specops.speedgate import SpeedGateError, judge, message  # on use, as in specops_model_file

    try:
        out = judge(spec_probe, plain_probe, spec_url, plain_url, float(min_ratio),
                    int(draft_n_max) if draft_n_max not in (None, "") else None, mode, float(max_spread))
    except SpeedGateError as exc:
        raise AnsibleFilterError(f"speed gate: {exc}") from exc
    out["message"] = message(out, action, service, int(parallel) if parallel not in (None, "") else None,
                             saturation or None)
    return out


def specops_gate_mode(fit: dict | None) -> str:
    from specops.speedgate import mode_from_fit

    return mode_from_fit(fit)


def specops_upgrade_diff(old_help: str, new_help: str, profile: dict, old_label: str = "deployed",
                         new_label: str = "new") -> dict:
    """The upgrade guard: what changes between the build a host runs (``old_help``, its ``--help``) and the one
    being deployed, for a person (``text``: renames, removals, dropped spellings, changed defaults and speculative
    types one per line; added flags only counted), and whether ``profile`` renders for the new build
    (``renders``, else ``reason``)."""
    from specops.capabilities import parse_help
    from specops.capdiff import diff_help, profile_renders, render_text

    d = diff_help(str(old_help), str(new_help))
    text = render_text(d, old_label, new_label, list_added=False).rstrip("\n")
    try:
        renders, why = profile_renders(ServerProfile.from_dict(dict(profile)), parse_help(str(new_help)))
    except ProfileError as exc:
        renders, why = False, str(exc)
    return {"changes": not d.empty, "text": text, "renders": renders,
            "reason": "" if renders else why.rstrip(". ")}


def specops_probe_summary(*args, **kwargs) -> dict:
    from specops.probe import summarize_probe  # on use: the probe's client pulls in httpx

    return summarize_probe(*args, **kwargs)


def specops_knob_vars(_: Any = None) -> list[str]:
    """The role variables of every llama-server setting, in the knob table's order (``llama_server_<name>``)."""
    return [k.role_var for k in KNOBS if k.role]


def specops_knob_profile(values: list[Any], backend: str | None = None,
                         tuned: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile (knob name -> value) from the values of :func:`specops_knob_vars`, in that order; a setting
    left null whose default differs per backend takes ``backend``'s from the knob table (or, for n-gram types that
    spell it with their own flag, llama.cpp's default for that type: the knob's :meth:`default_for`). ``tuned``:
    what the deploy's tune chose (role variable -> value, only settings the inventory left open), taken over the
    role's values (not set as facts: an extra var would silently outrank a fact)."""
    knobs = [k for k in KNOBS if k.role]
    if len(values) != len(knobs):
        raise AnsibleFilterError(f"specops_knob_profile: {len(values)} values for {len(knobs)} settings")
    by_var = {k.role_var: k.name for k in knobs}
    unknown = sorted(set(tuned or {}) - set(by_var))
    if unknown:
        raise AnsibleFilterError(f"specops_knob_profile: the tune set {', '.join(unknown)}, which is no setting")
    given = dict(zip((k.name for k in knobs), values, strict=True))
    given.update({by_var[var]: v for var, v in (tuned or {}).items()})
    return {k.name: (k.default_for(backend, given.get("spec_type")) if given[k.name] is None and k.backend_defaults
                     else given[k.name]) for k in knobs}


class FilterModule:
    def filters(self) -> dict:
        return {
            "specops_capabilities": specops_capabilities,
            "specops_argv": specops_argv,
            "specops_argv_spec_type": specops_argv_spec_type,
            "specops_argv_setting": specops_argv_setting,
            "specops_devices_argv": specops_devices_argv,
            "specops_systemd_exec": specops_systemd_exec,
            "specops_systemd_paths": specops_systemd_paths,
            "specops_systemd_env": specops_systemd_env,
            "specops_systemd_line": specops_systemd_line,
            "specops_systemd_credential": specops_systemd_credential,
            "specops_systemd_name": specops_systemd_name,
            "specops_systemd_size": specops_systemd_size,
            "specops_systemd_cpu_quota": specops_systemd_cpu_quota,
            "specops_systemd_address": specops_systemd_address,
            "specops_cmake_options": specops_cmake_options,
            "specops_input_problems": specops_input_problems,
            "specops_host_problems": specops_host_problems,
            "specops_is_loopback": specops_is_loopback,
            "specops_verify_problems": specops_verify_problems,
            "specops_build_id": specops_build_id,
            "specops_cmake_args": specops_cmake_args,
            "specops_configure_argv": specops_configure_argv,
            "specops_compile_argv": specops_compile_argv,
            "specops_probe_summary": specops_probe_summary,
            "specops_model_file": specops_model_file,
            "specops_device_problem": specops_device_problem,
            "specops_speed_gate": specops_speed_gate,
            "specops_knob_flags": specops_knob_flags,
            "specops_uses_draft_model": specops_uses_draft_model,
            "specops_models_wanted": specops_models_wanted,
            "specops_knob_vars": specops_knob_vars,
            "specops_knob_profile": specops_knob_profile,
            "specops_gate_mode": specops_gate_mode,
            "specops_upgrade_diff": specops_upgrade_diff,
        }
