"""Paired speed probes on the managed host: the same prompts sent to two llama-servers in turn.

Runs on the host (standard library only) and prints the raw answers as JSON; the controller judges them
(specops.speedgate). Each prompt goes once to each server, A then B for the first prompt, B then A for the
next, and so on, so a machine that slows or speeds up during the probe affects both alike; no prompt is
sent twice to one server (n-gram speculation would find the first answer in its pool and look faster).
With one URL it measures that server alone (the one-after-the-other mode, for hosts whose memory holds one
copy of the target).

Traffic is no side-by-side comparison: a client's request on one server takes the CPU from the other. So a
pair is measured only when no server has a request of anyone else's: before each pair the probe waits for
every server's slots to be idle, and while a request is measured it watches every server's /slots (each
``--watch-interval`` seconds); a pair during which another request ran is discarded ("contended") and its
prompt tried again in other words. Waiting and retrying (the time spent waiting for idle servers and on
discarded pairs, not the measuring itself) stop at ``--idle-timeout`` seconds: what was measured clean by then
is all the judge gets (too little is "unproven", never a verdict).

With ``--max-spread`` the probe keeps measuring (the prompts again, in other words; at most twice as many
pairs more, within the same ``--idle-timeout``) while the 95% interval of the speed ratio is wider than that --
a noisy host gets more samples rather than a verdict of chance. The controller judges all clean pairs.

With ``--streams N`` (the service's ``--parallel``) each pair is N chats at once on each server: the service's
aggregate tokens/s at N streams (every stream's tokens over the batch's wall time) against plain decoding's at N, and
"nobody else's request" means no more than our N on the measured server.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request

from specops.host import hostlib


def post(url: str, body: dict, headers: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={**headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def reason(exc: Exception, timeout: float) -> str:
    """One line for a failed request (a timeout says how long it was given)."""
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    return str(getattr(exc, "reason", None) or exc)


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


def busy_slots(url: str, headers: dict) -> int | None:
    """How many of the server's slots are processing a request; None when /slots does not answer."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/slots", headers=headers), timeout=5) as r:
            slots = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return hostlib.busy_slots(slots)


class Watch:
    """Polls every server's /slots while our requests are measured; ``foreign`` counts what it saw that was
    not ours: more than our ``ours`` requests on the measured server, any request on another one."""

    def __init__(self, urls: list[str], measured: str, headers: dict, interval: float, ours: int = 1) -> None:
        self.urls, self.measured, self.headers, self.interval, self.ours = urls, measured, headers, interval, ours
        self.foreign: dict[str, int] = {}
        self.blind = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for url in self.urls:
                busy = busy_slots(url, self.headers)
                if busy is None:
                    self.blind = True
                    continue
                extra = busy - (self.ours if url == self.measured else 0)
                if extra > 0:
                    self.foreign[url] = max(self.foreign.get(url, 0), extra)
            self._stop.wait(self.interval)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def wait_idle(urls: list[str], headers: dict, budget: float, interval: float) -> tuple[bool, float]:
    """(True once no server has a request in flight at one look at all of them, or False when ``budget`` seconds
    of waiting ran out; the seconds waited). Always looks at least once."""
    t0 = time.monotonic()
    while True:
        if all(busy_slots(url, headers) in (0, None) for url in urls):
            return True, time.monotonic() - t0
        if time.monotonic() - t0 >= budget:
            return False, time.monotonic() - t0
        time.sleep(interval)


def spread(requests: list[dict], urls: list[str]) -> float:
    """high ÷ low of the 95% t-interval of the per-prompt speed ratio (first URL ÷ second), as the judge
    computes it (geometric mean, t on the logarithms; t from a Cornish-Fisher expansion); inf below 3 pairs."""
    rates: dict[tuple[str, int], float] = {(r["url"], r["prompt"]): r["predicted_per_second"] or 0.0
                                           for r in requests}
    logs = [math.log(rates[(urls[0], i)] / rates[(urls[1], i)]) for (u, i) in rates
            if u == urls[0] and rates.get((urls[1], i), 0) > 0 and rates[(u, i)] > 0]
    if len(logs) < 3:
        return math.inf
    z, df = 1.959964, len(logs) - 1
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    return math.exp(2 * t * statistics.stdev(logs) / math.sqrt(len(logs)))


def variant(prompt: str, attempt: int) -> str:
    """The prompt, said again in other words for a retry (a server never sees the same prompt twice)."""
    return prompt if attempt == 0 else f"{prompt}\n\n(Attempt {attempt + 1}: answer afresh.)"


def chat_variant(messages: list, attempt: int) -> list:
    """A task's chat, its last message (the user's) said again in other words for a retry."""
    last = dict(messages[-1], content=variant(messages[-1]["content"], attempt))
    return [*messages[:-1], last]


def task_chats(paths: list, count: int) -> list:
    """Up to ``count`` chats from task files (the tune's llama_server_tune_tasks, the bench's JSONL format): the
    workloads in turn, each in file order, so the gate times the traffic the tune chose for (never printed: only
    the tasks' positions are)."""
    by_workload: dict = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip() and not line.lstrip().startswith("//"):
                    task = json.loads(line)
                    by_workload.setdefault(task.get("workload", path), []).append(task["messages"])
    chats, queues = [], [list(q) for q in by_workload.values()]
    while len(chats) < count and any(queues):
        for q in queues:
            if q and len(chats) < count:
                chats.append(q.pop(0))
    return chats


def batch(url: str, chats: list, tokens: int, headers: dict, timeout: float) -> dict:
    """``chats`` sent to ``url`` at once (one thread each) -> the batch's record: with one chat, the server's own
    decode rate; with N, the aggregate tokens/s (every stream's tokens over the wall time from the first request
    sent to the last answer: the service's throughput at N streams, as the tune's measurement at N counts it).
    The first failure is raised (urllib.error.URLError, OSError, ValueError)."""
    answers: list = [None] * len(chats)

    def one(k: int) -> None:
        try:
            answers[k] = post(url + "/v1/chat/completions", {"messages": chats[k], "max_tokens": tokens,
                                                             "temperature": 0.0, "seed": 42}, headers, timeout)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            answers[k] = exc

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(len(chats))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    e2e = time.monotonic() - t0
    for a in answers:
        if isinstance(a, Exception):
            raise a
    timings = [a.get("timings", {}) for a in answers]
    n = sum(int(t.get("predicted_n") or 0) for t in timings)
    rate = timings[0].get("predicted_per_second") if len(chats) == 1 else (round(n / e2e, 3) if e2e > 0 else None)
    return {"e2e_s": round(e2e, 3), "predicted_n": n, "predicted_per_second": rate,
            "draft_n": sum(int(t.get("draft_n") or 0) for t in timings),
            "draft_n_accepted": sum(int(t.get("draft_n_accepted") or 0) for t in timings)}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", action="append", required=True, help="server to probe (one or two)")
    ap.add_argument("--prompts", help="JSON list of prompts (each sent as one user message)")
    ap.add_argument("--tasks", action="append", default=[],
                    help="task JSONL file (repeatable): --task-count of their chats instead of --prompts")
    ap.add_argument("--task-count", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--api-key-file")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--idle-timeout", type=float, default=120,
                    help="seconds to spend waiting for idle servers and retrying contended pairs")
    ap.add_argument("--watch", action="append", default=[],
                    help="another server whose requests count as contention (the service, when measured alone)")
    ap.add_argument("--watch-interval", type=float, default=0.2)
    ap.add_argument("--streams", type=int, default=1,
                    help="requests in flight at once on the measured server (the service's slots): each "
                         "pair is then N chats at once on each server, timed as aggregate tokens/s")
    ap.add_argument("--max-spread", type=float, default=0.0,
                    help="with two servers: measure more pairs while the interval's high ÷ low exceeds this")
    args = ap.parse_args()
    if not args.tasks and not args.prompts:
        ap.error("give --prompts or --tasks")
    return args


def warm_up(urls: list[str], headers: dict[str, str], timeout: float) -> str:
    """One short request to each server (the first requests after a start are slow); why one failed, or ''."""
    # no "cache_prompt": false: llama.cpp builds of 2025 (4227c9be4) do not speculate on such a request, and the
    # gate would time plain decoding twice. Prompts are never repeated to a server, so nothing but the chat
    # template's first tokens can come from the prompt cache, in both arms alike.
    body = {"n_predict": 16, "temperature": 0.0, "seed": 42}
    for url in urls:
        try:
            post(url + "/completion", {**body, "prompt": "Warm-up."}, headers, timeout)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return f"the warm-up request to {url} failed: {reason(exc, timeout)}"
    return ""


def main() -> int:
    args = parse_args()
    headers = hostlib.auth_headers(args.api_key_file)
    prompts = (task_chats(args.tasks, args.task_count) if args.tasks
               else [[{"role": "user", "content": p}] for p in json.loads(args.prompts)])
    deadline = time.monotonic() + args.timeout
    for url in args.url:
        wait_healthy(url, headers, deadline)
    watched = list(dict.fromkeys(args.url + args.watch))
    streams = max(1, args.streams)
    out: dict = {"urls": args.url, "tokens": args.tokens, "streams": streams, "requests": [], "contended": [],
                 "idle_waited_s": 0.0, "slots_unavailable": False, "gave_up": ""}
    out["gave_up"] = warm_up(args.url, headers, args.timeout)
    if out["gave_up"]:
        print(json.dumps(out))
        return 0
    spent = 0.0  # waiting for idle servers and measuring pairs that were then discarded

    def left() -> float:
        return max(0.0, args.idle_timeout - spent)

    extra = 2 * len(prompts) if args.max_spread > 1 and len(args.url) == 2 else 0
    for i in range(len(prompts) + extra):
        if i >= len(prompts) and (spread(out["requests"], args.url) <= 0.9 * args.max_spread or left() <= 0):
            break
        # beyond the list: its prompts again, in other words (never the same text twice to a server); at N streams
        # pair i is the N chats after pair i-1's
        picks = [(prompts[j % len(prompts)], 100 * (j // len(prompts))) for j in range(i * streams, (i + 1) * streams)]
        attempt = 0
        order = list(args.url) if i % 2 == 0 else list(reversed(args.url))
        while True:
            pair, foreign, idle, spent_before, t_pair, failed = [], {}, True, spent, time.monotonic(), ""
            for url in order:
                # before each request: nobody else's request on any server, and our previous request's slot freed
                # (llama-server answers before it marks the slot free; the watch would take our own request for
                # somebody else's, and a busy host widens that gap)
                idle, waited = wait_idle(watched, headers, left(), args.watch_interval / 2)
                spent += waited
                out["idle_waited_s"] = round(out["idle_waited_s"] + waited, 2)
                if not idle:
                    break
                with Watch(watched, url, headers, args.watch_interval, streams) as watch:
                    try:
                        rec = batch(url, [chat_variant(p, cycle + attempt) for p, cycle in picks], args.tokens,
                                    headers, args.timeout)
                    except (urllib.error.URLError, OSError, ValueError) as exc:
                        # a request that fails or outlasts --timeout ends the measuring: no figure from it, and
                        # what was measured before stands or falls on its own (too few prompts: unproven)
                        failed = f"a request to {url} failed: {reason(exc, args.timeout)} (prompt {i + 1})"
                        break
                out["slots_unavailable"] = out["slots_unavailable"] or watch.blind
                for other, n in watch.foreign.items():
                    foreign[other] = max(foreign.get(other, 0), n)
                pair.append({"url": url, "prompt": i, "attempt": attempt, **rec})
            if failed:
                out["gave_up"] = failed
                break
            if not idle:
                out["gave_up"] = (f"the servers were not idle of other requests within {args.idle_timeout:g} s "
                                  f"(prompt {i + 1})") if i < len(prompts) else ""
                break
            if not foreign:
                out["requests"].extend(pair)
                break
            spent = spent_before + time.monotonic() - t_pair  # the waits and the discarded pair, counted once
            out["contended"].append({"prompt": i, "attempt": attempt, "other_requests": foreign})
            attempt += 1
        if out["gave_up"]:
            break
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
