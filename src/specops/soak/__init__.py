"""``specops soak``: a bounded load loop against one llama-server, with invariants, faults and a report.

Modules, one job each:

- :mod:`.config` — what to run (bounds, concurrency, retries, faults, thresholds)
- :mod:`.backoff` — exponential backoff delays
- :mod:`.accounting` — every request's attempts and final outcome; nothing is lost
- :mod:`.requester` — one request with retries, errors classified into short reasons
- :mod:`.reference` — greedy reference texts and the first diverging character
- :mod:`.workload` — the task set and the request bodies
- :mod:`.sampler` — server PID, RSS, restarts, exporter up (a background thread)
- :mod:`.faults` — kill -9, SIGSTOP/SIGCONT, systemctl restart; recovery times
- :mod:`.timeline` — per-minute tokens/s, acceptance, errors
- :mod:`.trend` — RSS slope (MB/hour)
- :mod:`.invariants` — which checks broke, and why
- :mod:`.alerts` — would the Prometheus alert rules have fired (optional)
- :mod:`.report` / :mod:`.plots` — Markdown + JSON + PNG
- :mod:`.runner` — ties it together
"""
