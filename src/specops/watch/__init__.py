"""``specops report``: the morning report — what the Grafana dashboard shows, from Prometheus, as markdown + PNG."""
