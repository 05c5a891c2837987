"""specops.host.unit_state: what runs against what systemd would start now (the unit on disk)."""

from __future__ import annotations

from specops.host import unit_state

# as `systemctl show` prints it (specifiers expanded, arguments joined by single spaces)
EXEC = ("{ path=/opt/llama.cpp/b1/bin/llama-server ; argv[]=/opt/llama.cpp/b1/bin/llama-server --model "
        "/srv/spec ops/t.gguf --ctx-size 4096 --api-key-file /run/credentials/x.service/k ; ignore_errors=no ; "
        "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }")
RUNNING = ["/opt/llama.cpp/b1/bin/llama-server", "--model", "/srv/spec ops/t.gguf", "--ctx-size", "4096",
           "--api-key-file", "/run/credentials/x.service/k"]


def props(**over: str) -> dict:
    return {"ActiveState": "active", "NeedDaemonReload": "no", "MainPID": "42", "InvocationID": "ab",
            "ExecStart": EXEC, **over}


def test_the_process_runs_the_unit_on_disk() -> None:
    out = unit_state.state(props(), RUNNING)
    assert out["matches"] is True and out["active"] and out["main_pid"] == 42


def test_an_interrupted_deploy_is_seen_old_process_new_file() -> None:
    old = [*RUNNING[:4], "8192", *RUNNING[5:]]
    assert unit_state.state(props(), old)["matches"] is False
    # a file changed on disk, not yet reloaded: what systemd shows is the old definition, so no match is claimed
    assert unit_state.state(props(NeedDaemonReload="yes"), RUNNING)["matches"] is False


def test_nothing_running_claims_nothing() -> None:
    out = unit_state.state(props(ActiveState="inactive", MainPID="0"), None)
    assert out["matches"] is None and not out["active"]
