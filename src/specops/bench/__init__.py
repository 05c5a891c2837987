"""``specops bench``: does speculative decoding pay on this host? Measured against baseline on a versioned task set.

The entry point is :mod:`session` (:func:`session.measure`: :class:`settings.BenchSettings` in, the outcome and
its results out), whose steps are :mod:`resolve` (the inputs), :mod:`lineup` (the ceiling and the arms it leaves),
:mod:`capacity` (servers side by side), :mod:`plan`, :mod:`runner` and :mod:`summary`; :mod:`voice` is what a run
says and how it stops.

Modules: :mod:`tasks` (task set), :mod:`arms` (what is compared), :mod:`ceiling` (hardware ceiling, pruning and
prediction), :mod:`design` (the paired, sequential design: blocks, stopping), :mod:`runner` (servers side by
side, requests alternating), :mod:`quantize` (cheaper drafts), :mod:`stats`, :mod:`identity`, :mod:`analysis`,
:mod:`recommend` (the tune's rule chooses, the A/A check guards applying it), :mod:`report`, :mod:`plots`,
:mod:`inventory`, :mod:`summary`, :mod:`store`, :mod:`weighted` (a mix's speedup weighted by time, and its interval).
"""
