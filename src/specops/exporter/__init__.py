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
  a server restart makes them drop and Prometheus' ``rate()``/``increase()`` treat that as a reset. The
  exporter's own windowed figures (acceptance ratio, acceptance length, decode tokens/s) use the same reset
  rule, and a PID change forces one.
* **Bad input never kills it.** Every endpoint fetch is bounded (timeout, total deadline, body cap),
  every payload is parsed defensively; failures become ``llamacpp_up 0`` and
  ``specops_exporter_scrape_errors_total{endpoint,kind}`` and are logged once per state change.
"""
