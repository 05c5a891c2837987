#!/usr/bin/env python3
"""Paired speed probes on the managed host: the same prompts sent to two llama-servers in turn.

Runs on the host (standard library only) and prints the raw answers as JSON; the controller judges them
(specops.speedgate). Each prompt goes once to each server, A then B for the first prompt, B then A for the
next, and so on, so a machine that slows or speeds up during the probe affects both alike; no prompt is
sent twice to one server (n-gram speculation would find the first answer in its pool and look faster).
With one URL it measures that server alone (the one-after-the-other mode, for hosts whose memory holds one
copy of the target).
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def post(url: str, body: dict, headers: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={**headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_healthy(url: str, headers: dict, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url + "/health", headers=headers), timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(json.dumps({"error": f"{url} did not become healthy"}))
        time.sleep(0.5)


def read_key(path: str) -> str:
    """The first key as llama-server reads --api-key-file: lines split at LF only, nothing stripped (a CR or a
    space stays in the key), empty lines and lines starting with # skipped."""
    with open(path, "rb") as fh:
        lines = fh.read().decode("utf-8", "replace").split("\n")
    return next((line for line in lines if line and not line.startswith("#")), "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", action="append", required=True, help="server to probe (one or two)")
    ap.add_argument("--prompts", required=True, help="JSON list of prompts")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--api-key-file")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    headers = {}
    if args.api_key_file:
        headers["Authorization"] = f"Bearer {read_key(args.api_key_file)}"
    prompts = json.loads(args.prompts)
    deadline = time.monotonic() + args.timeout
    for url in args.url:
        wait_healthy(url, headers, deadline)
    out = {"urls": args.url, "tokens": args.tokens, "requests": []}
    body = {"n_predict": 16, "temperature": 0.0, "seed": 42, "cache_prompt": False}
    for url in args.url:  # warm-up: first requests after a start are slow
        post(url + "/completion", {**body, "prompt": "Warm-up."}, headers, args.timeout)
    for i, prompt in enumerate(prompts):
        order = list(args.url) if i % 2 == 0 else list(reversed(args.url))
        for url in order:
            t0 = time.monotonic()
            res = post(url + "/v1/chat/completions", {
                "messages": [{"role": "user", "content": prompt}], "max_tokens": args.tokens,
                "temperature": 0.0, "seed": 42, "cache_prompt": False}, headers, args.timeout)
            t = res.get("timings", {})
            out["requests"].append({
                "url": url, "prompt": i, "e2e_s": round(time.monotonic() - t0, 3),
                "predicted_n": t.get("predicted_n"), "predicted_per_second": t.get("predicted_per_second"),
                "draft_n": t.get("draft_n", 0), "draft_n_accepted": t.get("draft_n_accepted", 0),
            })
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
