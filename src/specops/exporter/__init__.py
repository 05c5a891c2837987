"""``specops exporter``: the only scraper of llama-server, re-exposing it for Prometheus.

Design (see also roles/exporter/README.md):

* **Background interval scraping.** A single thread scrapes llama-server every ``interval`` seconds
  (``/health``, ``/metrics``, ``/slots``; ``/props`` once per server (re)start) and swaps in an immutable
  :class:`~specops.exporter.state.Snapshot`. Prometheus scrapes of the exporter only read the latest
  snapshot through a custom collector, so llama-server sees at most one ``/metrics`` GET per interval no
  matter how many Prometheus servers scrape the exporter. That matters because every GET of ``/metrics``
  resets llama-server's ``*_tokens_seconds`` gauges; the exporter never re-exposes those gauges and derives
  rates from the ``*_total`` counters instead.
* **Counters stay counters.** The server's counters are exported as counters under ``llamacpp_*`` names;
  a server restart makes them drop and Prometheus' ``rate()``/``increase()`` treat that as a reset.
* **Derived figures tell the truth or nothing** (:mod:`~specops.exporter.derived`). The exporter's own
  windowed figures (acceptance ratio, acceptance length, per-position acceptance, decode tokens/s) come
  from consecutive good passes only: a pass with invalid or partial speculative counters, counters that
  contradict each other (accepted rising faster than drafted, ...: counted as ``invalid_value`` and refused),
  a counter going backwards, a jump back to the level from before such a decrease, or a PID change restarts
  the window for all of them; they are absent while the server is down and without two good passes within
  twice the window. Per-position counters that do not add up to the accepted total over the window (standing
  still while it rises) withdraw the per-position figures only, counted as ``invalid_value`` too.
  ``llamacpp_exporter_last_success_timestamp_seconds`` says when /metrics was last read whole.
* **Unknown is not off** (:mod:`~specops.exporter.speculation`). Whether the server should speculate is
  on / off / unknown, from its command line first and /slots second (remembered until a restart);
  ``llamacpp_speculation_state_known`` exports the third state, ``llamacpp_speculation_expected`` is absent
  while unknown, and the ``llamacpp_server_info`` labels never change set nor churn on failures.
* **Bad input never kills it.** Every endpoint fetch is bounded (timeout, total deadline, body cap),
  every payload is parsed defensively (``/slots`` against a schema; a cut or duplicated ``/metrics`` body is
  ``kind="invalid"``); failures become ``llamacpp_up 0`` and
  ``specops_exporter_scrape_errors_total{endpoint,kind}`` and are logged: every new error kind or message
  and the start and end (with its duration) of every outage; only repeats of one message are rate-limited, to
  one summary line a minute with a count. Bad settings and a port in use stop it at startup with one
  line on stderr and exit status 2.
"""
