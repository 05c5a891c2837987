"""Filters for the build's devices (specops.devices): how to list them, and whether a listing shows one of the
backend's."""

from __future__ import annotations

from specops import devices, rpc


def devices_argv(binary: str) -> list[str]:
    """``llama-server --list-devices``'s argv for ``binary``."""
    return devices.devices_argv(str(binary))


FILTERS = {
    "specops_rpc_remote_hosts": rpc.remote_hosts,
    "specops_devices_argv": devices_argv,
    "specops_device_problem": devices.run_problem,
}
