"""The rules a speculative profile's output is held to against plain decoding's (issue 78), named once for the
bench, the tune and the role's ``llama_server_tune_rule`` (this module imports nothing, so the filter plugins and
the tune settings table read it for free).

- ``equivalent`` (default): the same answers except near-ties, each one quoted: where plain decoding's top two
  choices are closer than a verifying batch moves them on the host (:mod:`specops.bench.explain` measures it).
- ``identical``: byte for byte on every answer checked.
- ``fastest``: output not judged (benchmarking with imposed acceptance only).

Under the first two, a change (plain decoding's choice was clear) or an unexplained difference is never served.
"""

RULES = ("equivalent", "identical", "fastest")
IDENTITY_RULES = ("equivalent", "identical")
DEFAULT_RULE = "equivalent"
