"""Filters for systemd unit text (specops.unitfile): every value a unit template writes goes through one of these
(tests/unit/test_unit_templates_escaped.py); a value a unit cannot hold fails the task in one line."""

from __future__ import annotations

from typing import Any

from specops import unitfile
from specops.filters import refused, refusing
from specops.unitfile import UnitValueError


def systemd_exec(argv: list[str] | str, multiline: bool = False, verbatim: list[str] | None = None,
                 what: str = "llama-server argument") -> str:
    """argv for ExecStart= (quoted, % and $ escaped; control characters refused)."""
    with refused(UnitValueError):
        return unitfile.exec_line([argv] if isinstance(argv, str) else [str(a) for a in argv], multiline,
                                  tuple(verbatim or ()), what)


def systemd_env(env: dict[str, Any], what: str = "environment") -> list[str]:
    """One quoted "KEY=value" word per entry of ``env`` (sorted by key), for Environment= lines."""
    with refused(UnitValueError):
        return unitfile.env_assignments(dict(env), what)


def systemd_credential(path: str, name: str, what: str = "credential") -> str:
    """NAME:PATH for LoadCredential=."""
    with refused(UnitValueError):
        return unitfile.credential(name, path, what)


FILTERS = {
    "specops_systemd_exec": systemd_exec,
    "specops_systemd_paths": refusing(unitfile.path_list, UnitValueError),
    "specops_systemd_env": systemd_env,
    "specops_systemd_line": refusing(unitfile.line_value, UnitValueError),
    "specops_systemd_credential": systemd_credential,
    "specops_systemd_name": refusing(unitfile.plain_name, UnitValueError),
    "specops_systemd_size": refusing(unitfile.memory_size, UnitValueError),
    "specops_systemd_cpu_quota": refusing(unitfile.cpu_quota, UnitValueError),
    "specops_systemd_address": refusing(unitfile.address_prefix, UnitValueError),
}
