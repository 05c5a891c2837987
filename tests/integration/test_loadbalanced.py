"""A host behind HAProxy (roles/loadbalancer) on the lab host, deployed by deploy.yml with a client streaming
completions *through the load balancer* the whole time (issue 15, the one-host slice of the rolling deploy):

- a changed setting: the host leaves the pool (drained: HAProxy sends it nothing new, what it serves finishes),
  restarts, is proven, and comes back (HAProxy's own health check UP) — no answer is cut mid-stream;
- a bad rollout (a setting that fails its proof): rolled back to the known-good unit and back in the pool, the
  play fails naming the host and the cause, no answer cut;
- a no-change run drains nothing.
With one server, requests that arrive while it is out of the pool get HAProxy's 503 (no server left): they are
counted and printed, not asserted away — zero failed requests needs a second server to take them, which is the
three-host fleet test (next step of issue 15: lab hosts reach only the controller, not each other, so the load
balancer runs here in the same lab host as the server).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_deploy import UNIT, deploy, main_pid
from tests.integration.test_live_host import Stream

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

LB_PORT = 8000
ADMIN = "/run/haproxy/admin.sock"


@pytest.fixture(scope="module")
def lb_inventory(labhost, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lb") / "loadbalancers.yml"
    path.write_text(json.dumps({"all": {"children": {
        "loadbalancers": {"hosts": {labhost.name: {}}},
        # HAProxy runs beside llama-server, which listens on loopback only
        "llama_servers": {"hosts": {labhost.name: {"loadbalancer_server_address": "127.0.0.1"}}}}}}))
    return path


def lb_deploy(labhost, lb_inventory: Path, *extra: str):
    return deploy(labhost, "-i", str(lb_inventory), "-e", "loadbalancer_bind_address=127.0.0.1",
                  "-e", f"loadbalancer_port={LB_PORT}", *extra)


def server_status(labhost) -> str:
    code = (f"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{ADMIN}'); s.sendall(b'show stat\\n'); "
            "print(b''.join(iter(lambda: s.recv(65536), b'')).decode())")
    out = labhost.run(["python3", "-c", code]).stdout
    for line in out.splitlines():
        fields = line.split(",")
        if len(fields) > 17 and fields[0] == "llama_servers" and fields[1] == labhost.name:
            return fields[17]
    raise AssertionError(f"no server {labhost.name} in HAProxy's stats: {out[:500]}")


@pytest.fixture(scope="module")
def balanced(labhost, llama_build, lb_inventory):
    run = lb_deploy(labhost, lb_inventory)
    assert run.rc == 0, run.output[-6000:]
    assert server_status(labhost) == "UP"
    yield
    restore = deploy(labhost)  # the suite's own settings again (HAProxy stays, unused)
    assert restore.rc == 0, restore.output[-4000:]


def test_a_changed_setting_drains_the_host_and_loses_no_request(balanced, labhost, lb_inventory):
    before = main_pid(labhost)
    with Stream(labhost, tokens=64, url=f"http://127.0.0.1:{LB_PORT}/completion") as stream:
        run = lb_deploy(labhost, lb_inventory, "-e", "llama_server_ctx_size=1536")
        stream.wait_ok(1, after=stream.records[-1]["end"] if stream.records else 0)
    assert run.rc == 0, run.output[-6000:]
    assert main_pid(labhost) != before
    assert "Drain this server from the load balancer" in run.output and "Put this server back" in run.output
    print(f"\nchanged setting behind HAProxy: {len(stream.records)} requests, cut {len(stream.cut)}, "
          f"refused while the only server was out {len(stream.refused)} (longest {stream.window():.1f} s)")
    assert stream.records and not stream.cut, stream.cut[:3]
    assert server_status(labhost) == "UP"


def test_a_bad_rollout_is_rolled_back_and_back_in_the_pool(balanced, labhost, lb_inventory):
    with Stream(labhost, tokens=64, url=f"http://127.0.0.1:{LB_PORT}/completion") as stream:
        run = lb_deploy(labhost, lb_inventory, "-e", '{"llama_server_extra_args": ["--lora", "/nonexistent/a.gguf"]}')
        stream.wait_ok(1, after=stream.records[-1]["end"] if stream.records else 0)
    assert run.rc != 0
    assert f"The new llama-server configuration failed on {labhost.name}" in run.text, run.text[-3000:]
    assert "answers /health again" in run.text
    print(f"\nbad rollout behind HAProxy: {len(stream.records)} requests, cut {len(stream.cut)}, "
          f"refused while the only server was out {len(stream.refused)} (longest {stream.window():.1f} s)")
    assert not stream.cut, stream.cut[:3]
    assert server_status(labhost) == "UP"
    assert labhost.run(["systemctl", "is-active", UNIT]).stdout.strip() == "active"


def test_a_run_with_nothing_changed_drains_nothing(balanced, labhost, lb_inventory):
    lb_deploy(labhost, lb_inventory, "-e", "llama_server_ctx_size=1536")  # the state the first test left
    pid = main_pid(labhost)
    run = lb_deploy(labhost, lb_inventory, "-e", "llama_server_ctx_size=1536")
    assert run.rc == 0, run.output[-4000:]
    assert main_pid(labhost) == pid
    assert "Drain this server from the load balancer" not in run.output
