"""``specops bench``: does speculative decoding pay on this host? Measured against baseline on a versioned task set.

Modules: :mod:`tasks` (task set), :mod:`arms` (what is compared), :mod:`ceiling` (hardware ceiling, pruning and
prediction), :mod:`design` (the paired, sequential design: blocks, stopping), :mod:`runner` (servers side by
side, requests alternating), :mod:`quantize` (cheaper drafts), :mod:`stats`, :mod:`identity`, :mod:`analysis`,
:mod:`recommend` (A/A-gated), :mod:`report`, :mod:`inventory`, :mod:`summary`, :mod:`store`.
"""
