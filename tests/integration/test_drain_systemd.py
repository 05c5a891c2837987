"""roles/llama_server/files/drain.py on the lab host's real systemd: when the unit it restarts cannot start, it says
why (systemd's result and exit status, the unit's journal) on one line, the line the deploy's failure message
quotes, and exits 1 (seen once under load: "Job ... failed because the control process exited with error code",
and nothing else to go on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.systemd]

DRAIN = Path(__file__).resolve().parents[2] / "roles" / "llama_server" / "files" / "drain.py"
UNIT = "specops-drain-cannot-start"


def test_a_unit_that_cannot_start_is_explained_in_one_line(labhost):
    labhost.run(["sh", "-c", f"printf '[Service]\\nType=exec\\nExecStart=/nonexistent/llama-server --port 9\\n'"
                             f" > /run/systemd/system/{UNIT}.service && systemctl daemon-reload"])
    try:
        proc = labhost.run(["python3", "-", "--unit", UNIT, "--url", "http://127.0.0.1:9"], check=False,
                           input=DRAIN.read_text())
        assert proc.returncode == 1, proc
        out = json.loads(proc.stdout.splitlines()[-1])
        assert out["drained"] and "restart_s" not in out
        why = proc.stderr.strip().splitlines()[-1]
        assert why == out["start_failed"]
        assert why.startswith(f"systemctl start {UNIT} failed: result exit-code, main process status 203"), why
        assert "/nonexistent/llama-server" in why, why   # the journal line that names the missing binary
    finally:
        labhost.run(["sh", "-c", f"rm -f /run/systemd/system/{UNIT}.service; systemctl daemon-reload;"
                                 f" systemctl reset-failed {UNIT}"], check=False)
