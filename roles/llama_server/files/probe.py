#!/usr/bin/env python3
"""One probe completion against llama-server, with /metrics before and after and /slots.

Runs on the managed host (standard library only) and prints the raw answers as JSON; the
controller parses the Prometheus text with prometheus-client (specops_metric filter) and decides.
"""

import argparse
import json
import sys
import urllib.request


def get(url: str, headers: dict, timeout: float = 30) -> str:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read(4 * 1024 * 1024).decode("utf-8", "replace")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--api-key-file")
    args = ap.parse_args()
    headers = {}
    if args.api_key_file:
        with open(args.api_key_file) as fh:
            key = next((line.strip() for line in fh if line.strip() and not line.startswith("#")), "")
        headers["Authorization"] = f"Bearer {key}"
    out = {"metrics_before": get(args.url + "/metrics", headers)}
    body = json.dumps({"prompt": args.prompt, "n_predict": args.tokens, "temperature": 0.0, "seed": 42,
                       "cache_prompt": False, "ignore_eos": True}).encode()
    req = urllib.request.Request(args.url + "/completion", data=body,
                                 headers={**headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        completion = json.loads(resp.read())
    out["content"] = completion.get("content", "")
    out["timings"] = completion.get("timings", {})
    out["metrics_after"] = get(args.url + "/metrics", headers)
    out["slots"] = json.loads(get(args.url + "/slots", headers))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
