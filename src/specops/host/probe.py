"""Prove llama-server speculates: /metrics before and after, /slots, and (when needed) one probe completion.

Runs on the managed host (standard library only) and prints the raw answers as JSON; the controller parses
the Prometheus text with prometheus-client (specops_probe_summary) and decides.

``--busy-deadline S`` (an unchanged, running unit): the traffic is the proof when it shows speculation --
the speculation counters of the same process moved since the last proof (``--state``); else the same process's
earlier proof stands ("earlier": the unit is unchanged and the process proven then is the one running, the same
PID started at the same moment, so a completion would prove nothing new, and on a 2-core CPU it cost a no-op
re-deploy 20 s); else the counters moving within S seconds while a slot is busy; else a probe completion that must
answer within what is left of S (it would otherwise queue behind a long answer on the only slot). "source" says
which: traffic, earlier, probe or unproven.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

from specops.host.hostlib import auth_headers, systemctl_show

DRAFTED = re.compile(r"^llamacpp:spec_decode_num_draft_tokens_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def get(url: str, headers: dict, timeout: float = 30) -> str:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read(4 * 1024 * 1024).decode("utf-8", "replace")


def drafted(metrics: str) -> float:
    match = DRAFTED.search(metrics or "")
    return float(match.group(1)) if match else 0.0


def main_process(unit: str) -> tuple[int, str]:
    """The unit's main PID and when it started (systemd's monotonic start stamp): together they name one process,
    a PID reused by a later start reads differently. (0, "") without a unit."""
    if not unit:
        return 0, ""
    got = systemctl_show(unit, "MainPID", "ExecMainStartTimestampMonotonic")
    return int(got.get("MainPID") or 0), got.get("ExecMainStartTimestampMonotonic", "")


def completion(url: str, headers: dict, prompt: str, tokens: int, timeout: float) -> dict:
    # no "cache_prompt": false here: llama.cpp builds of 2025 (4227c9be4) do not speculate on such a request
    body = json.dumps({"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "seed": 42,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/completion", data=body,
                                 headers={**headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def load_state(path: str) -> dict:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def save_state(path: str, pid: int, metrics: str, started: str = "", proof: dict | None = None) -> None:
    """The counters after this proof, and the proof itself (when, the counters before it, the completion's timings)
    for the same process's next deploy."""
    if path and pid:
        with open(path + ".tmp", "w") as fh:
            json.dump({"pid": pid, "started": started, "metrics": metrics, "proof": proof}, fh)
        os.replace(path + ".tmp", path)


def proof_of(out: dict) -> dict:
    return {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": out["source"],
            "metrics_before": out["metrics_before"], "timings": out.get("timings", {})}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--api-key-file")
    ap.add_argument("--unit", default="")
    ap.add_argument("--state", default="", help="where the last proof's counters are kept (same process only)")
    ap.add_argument("--busy-deadline", type=float, default=0.0)
    args = ap.parse_args()
    headers = auth_headers(args.api_key_file)
    try:
        return prove(args, headers)
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            raise
        # one JSON line the deploy shows as it is (verify.yml), instead of a traceback; never the key
        where = (f"the first key in {args.api_key_file} (llama_server_api_key_file)" if args.api_key_file
                 else "no key (llama_server_api_key_file is not set)")
        print(json.dumps({"error": f"{args.url} answered HTTP 401 (Invalid API Key) to the probe, which sent {where}; "
                                   "make that file hold the key llama-server was started with, then deploy again"}))
        return 3


def prove(args: argparse.Namespace, headers: dict) -> int:
    t0 = time.monotonic()
    pid, started = main_process(args.unit)
    now = get(args.url + "/metrics", headers)
    out = {"source": "probe", "metrics_before": now, "pid": pid}
    if args.busy_deadline > 0:
        prev = load_state(args.state)
        same = bool(pid) and prev.get("pid") == pid and prev.get("started", "") == started
        slots = json.loads(get(args.url + "/slots", headers))
        busy = any(s.get("is_processing") for s in slots)
        out["busy"] = busy
        earlier = prev.get("proof") if same else None
        if same and drafted(now) > drafted(prev.get("metrics", "")):
            out.update(source="traffic", since="the last proof", metrics_before=prev["metrics"], metrics_after=now)
        elif earlier and earlier.get("metrics_before"):
            out.update(source="earlier", since=f"{earlier.get('at', '?')} (the same process, pid {pid})",
                       metrics_before=earlier["metrics_before"], metrics_after=now,
                       timings=earlier.get("timings") or {})
        elif busy:
            while time.monotonic() - t0 < args.busy_deadline:
                time.sleep(0.5)
                later = get(args.url + "/metrics", headers)
                if drafted(later) > drafted(now):
                    out.update(source="traffic", since="this deploy began", metrics_after=later)
                    break
        if out["source"] in ("traffic", "earlier"):
            out["slots"] = json.loads(get(args.url + "/slots", headers))
            out["seconds"] = round(time.monotonic() - t0, 2)
            save_state(args.state, pid, out["metrics_after"], started,
                       earlier if out["source"] == "earlier" else proof_of(out))
            print(json.dumps(out))
            return 0
    left = args.busy_deadline - (time.monotonic() - t0) if args.busy_deadline > 0 else 600
    try:
        answer = completion(args.url, headers, args.prompt, args.tokens, max(left, 5.0))
    except (TimeoutError, urllib.error.URLError) as exc:
        if args.busy_deadline <= 0 or getattr(exc, "code", None) == 401:
            raise
        out.update(source="unproven", reason=f"probe got no answer within {args.busy_deadline:g} s ({exc})",
                   metrics_after=now, slots=json.loads(get(args.url + "/slots", headers)),
                   seconds=round(time.monotonic() - t0, 2))
        print(json.dumps(out))
        return 0
    out["content"] = answer.get("content", "")
    out["timings"] = answer.get("timings", {})
    out["metrics_after"] = get(args.url + "/metrics", headers)
    out["slots"] = json.loads(get(args.url + "/slots", headers))
    out["seconds"] = round(time.monotonic() - t0, 2)
    save_state(args.state, pid, out["metrics_after"], started, proof_of(out))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
