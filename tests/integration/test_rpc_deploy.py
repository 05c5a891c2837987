"""Two devices on one CPU machine (issue 81 item 3): two ``ggml-rpc-server`` processes on a lab host of this
module's own, bound to 127.0.0.1 (rpc-server has no authentication), started and stopped by the test as transient
units; deploy.yml serves SmolLM2 as target and draft across them (``llama_server_rpc``, the target split over RPC0
and RPC1, the draft on RPC1), proves speculation and runs the speed gate (one after the other: a ggml-rpc-server
serves one client at a time, so plain decoding cannot run beside the service); a no-op re-deploy keeps it. The
lab's llama.cpp build carries the RPC backend (specops_lab.labhost.LAB_BUILD_VARS). Bad RPC inputs are refused in
the first play and change nothing. Run with -s for the summary lines."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Iterator

import pytest

from tests import lab
from tests.integration.test_deploy import PROFILE, UNIT
from tests.labhost_fixture import Lab, bring_up

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

PORTS = (50052, 50053)
SERVER = "/usr/local/bin/ggml-rpc-server"
# each device's free MiB as the operator gives it (specops_fit_device_mib): the fit checks each against its own
RPC = {"llama_server_rpc": ",".join(f"127.0.0.1:{p}" for p in PORTS), "llama_server_device": "RPC0,RPC1",
       "llama_server_draft_device": "RPC1", "llama_server_ngl": "99", "llama_server_draft_ngl": "99",
       "specops_fit_device_mib": "RPC0=4000,RPC1=4000"}


def rpc_unit(port: int) -> str:
    return f"specops-lab-rpc-{port}"


def deploy(host: Lab, extra: dict) -> lab.PlaybookRun:
    return lab.ansible_playbook("deploy.yml", "-i", "inventory/builder.yml", "-i", str(host.inventory),
                                "-e", f"@{PROFILE}", "-e", f"llama_cpp_install_root={lab.LAB_INSTALL_ROOT}",
                                "-e", json.dumps(extra))


def service_pid(host: Lab) -> int:
    return int(host.run(["systemctl", "show", "-p", "MainPID", "--value", UNIT]).stdout.strip() or 0)


def listening(host: Lab) -> set[int]:
    out = host.run(["ss", "-Hltn"]).stdout
    return {int(m) for m in re.findall(r"127\.0\.0\.1:(\d+)\s", out)}


@pytest.fixture(scope="module")
def rpchost(llama_build: lab.LlamaBuild) -> Iterator[Lab]:
    """A lab host of its own with two ggml-rpc-server units on loopback (the lab build's binary, copied in)."""
    binary = llama_build.bin("ggml-rpc-server")
    assert binary.is_file(), f"{binary}: the lab build has no ggml-rpc-server (llama_cpp_rpc: true)"
    host = bring_up(f"specops-rpc-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}", fresh=True)
    try:
        host.run(["sh", "-c", f"base64 -d > {SERVER} && chmod 755 {SERVER}"],
                 input=base64.b64encode(binary.read_bytes()).decode())
        for port in PORTS:
            host.run(["systemd-run", f"--unit={rpc_unit(port)}", SERVER, "--host", "127.0.0.1", "--port", str(port),
                      "--threads", "1"])
        deadline = time.monotonic() + 60
        while not set(PORTS) <= listening(host):
            assert time.monotonic() < deadline, host.run(["journalctl", "--no-pager", "-n", "30"]).stdout
            time.sleep(0.5)
        yield host
    finally:
        host.host.destroy()


@pytest.fixture(scope="module")
def deployed(rpchost: Lab) -> lab.PlaybookRun:
    run = deploy(rpchost, RPC)
    assert run.rc == 0, run.output[-6000:]
    return run


def test_the_pair_is_served_across_two_rpc_devices_proven_and_gated(deployed: lab.PlaybookRun, rpchost: Lab):
    proof = re.search(r"answers and speculates: ([1-9]\d*) drafted, (\d+) accepted", deployed.text)
    assert proof, deployed.text[-3000:]
    gate = re.search(r"speculative [\d.]+ tok/s vs plain [\d.]+ tok/s \([^)]*one after the other\)", deployed.text)
    assert gate, deployed.text[-3000:]
    unit = rpchost.run(["systemctl", "cat", UNIT]).stdout
    assert f"--rpc {RPC['llama_server_rpc']}" in unit and "--device RPC0,RPC1" in unit, unit
    assert "--spec-draft-device RPC1" in unit and "IPAddressDeny=any" in unit, unit
    assert unit.index("--rpc ") < unit.index("--device "), unit  # --device names what --rpc registers
    # each ggml-rpc-server holds a share of the models (SmolLM2's 98 MB file: RPC1 the draft and half the target)
    held = {}
    for port in PORTS:
        pid = rpchost.run(["systemctl", "show", "-p", "MainPID", "--value", rpc_unit(port)]).stdout.strip()
        held[port] = int(rpchost.run(["ps", "-o", "rss=", "-p", pid]).stdout.strip()) // 1024
    assert held[PORTS[0]] > 20 and held[PORTS[1]] > held[PORTS[0]], held
    print(f"\nRPC | proof: {proof.group(1)} drafted, {proof.group(2)} accepted | gate: {gate.group(0)} | "
          f"ggml-rpc-server RSS MiB {held}")


def test_a_no_op_re_deploy_keeps_the_service_on_its_devices(deployed: lab.PlaybookRun, rpchost: Lab):
    before = service_pid(rpchost)
    run = deploy(rpchost, RPC)
    assert run.rc == 0, run.output[-6000:]
    assert run.recap(rpchost.name).get("changed") == 0, run.output[-4000:]
    assert service_pid(rpchost) == before > 0


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"llama_server_rpc": "10.0.0.5:50052,127.0.0.1:50053"},
     "llama_server_rpc='10.0.0.5:50052,127.0.0.1:50053': 10.0.0.5:50052 is beyond loopback, and ggml-rpc-server has "
     "no authentication"),
    ({"llama_server_rpc": "127.0.0.1:50052,127.0.0.1:50052"}, "127.0.0.1:50052 is listed twice"),
    ({"llama_server_tune": "auto"}, "llama_server_tune=auto with llama_server_rpc="),
])
def test_bad_rpc_inputs_are_refused_in_the_first_play_and_change_nothing(deployed: lab.PlaybookRun, rpchost: Lab,
                                                                         extra: dict, fragment: str):
    before = (service_pid(rpchost), lab.file_sha(rpchost, f"/etc/systemd/system/{UNIT}.service"))
    run = deploy(rpchost, {**RPC, **extra})
    assert run.rc != 0
    line = lab.refusal_line(run.text, fragment)
    assert "PLAY [Build llama.cpp" not in run.output, run.output[-3000:]
    assert (service_pid(rpchost), lab.file_sha(rpchost, f"/etc/systemd/system/{UNIT}.service")) == before
    print(f"\nREFUSED | {line}")


def test_a_device_too_small_for_its_share_is_refused_naming_it_before_anything_changes(deployed: lab.PlaybookRun,
                                                                                     rpchost: Lab):
    """Together the two devices hold the pair many times over; RPC1, given 150 MiB, cannot hold the draft and its
    half of the target: the preflight's fit refuses in one line naming RPC1, and the running service is untouched."""
    before = (service_pid(rpchost), lab.file_sha(rpchost, f"/etc/systemd/system/{UNIT}.service"))
    run = deploy(rpchost, {**RPC, "specops_fit_device_mib": "RPC0=4000,RPC1=150"})
    assert run.rc != 0
    line = lab.refusal_line(run.text, "result: DOES NOT FIT: RPC1 would hold")
    assert "memory estimate" not in line, line  # the one result line, not the whole report
    assert "has 150 MiB free" in line and "the sum fits, this device does not" in line, line
    assert "PLAY [Deploy the speculative service]" not in run.output, run.output[-3000:]
    assert (service_pid(rpchost), lab.file_sha(rpchost, f"/etc/systemd/system/{UNIT}.service")) == before
    print(f"\nREFUSED | {line}")


def test_left_open_the_draft_goes_where_most_room_is_left_and_the_unit_pins_it(deployed: lab.PlaybookRun,
                                                                              rpchost: Lab):
    """llama_server_draft_device unset on two devices: llama.cpp would split the draft like the target; the fit puts
    it on the device with the most room after the target, the deploy says so and pins it into the unit."""
    run = deploy(rpchost, {k: v for k, v in RPC.items() if k != "llama_server_draft_device"})
    assert run.rc == 0, run.output[-6000:]
    said = re.search(r"placement: --device RPC0,RPC1 --tensor-split 4000,4000 --spec-draft-device (RPC[01]); "
                     r"tensor_split: [^;]*; draft_device: the most room after the target", run.text)
    assert said, run.text[-4000:]
    unit = rpchost.run(["systemctl", "cat", UNIT]).stdout
    assert f"--spec-draft-device {said.group(1)}" in unit, unit
    assert re.search(r"answers and speculates: [1-9]\d* drafted", run.text), run.text[-3000:]
    print(f"\nPLACED | {said.group(0)}")
