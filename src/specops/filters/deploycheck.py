"""Filters for the deploy's checks before anything changes (specops.deploycheck): the role's inputs, the host, and
what `systemd-analyze verify` said of the rendered units."""

from __future__ import annotations

from typing import Any

from specops import deploycheck


def input_problems(values: dict[str, Any], specs: dict[str, Any]) -> list[str]:
    """One line per setting that is wrong (type, choice, range, path, unit-representable); [] when all is well."""
    return deploycheck.check_inputs(dict(values), dict(specs))


def host_problems(facts: dict[str, Any], host: str, key_file: str, ports: dict[str, Any],
                  our_units: list[str]) -> list[str]:
    """One line per problem on the host: the API key file (present, a file, root-owned, 0600, its lines as
    llama-server reads them), the ports, and whether the service user can read the models."""
    return deploycheck.check_host(dict(facts), host, str(key_file or ""), {k: int(v) for k, v in dict(ports).items()},
                                  list(our_units))


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    return deploycheck.is_loopback(str(host))


def verify_problems(result: dict[str, Any], units: list[str], binary: str = "",
                    binary_installed: bool = True) -> list[str]:
    """One line per unit that `systemd-analyze verify` (a registered result, or a loop's) did not accept."""
    return deploycheck.verify_problems(list(result.get("results", [result])), list(units), binary,
                                       bool(binary_installed))


FILTERS = {
    "specops_input_problems": input_problems,
    "specops_host_problems": host_problems,
    "specops_is_loopback": is_loopback,
    "specops_verify_problems": verify_problems,
}
