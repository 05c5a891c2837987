"""``specops bench``: speculative decoding measured against baseline on a versioned task set.

Modules: :mod:`tasks` (task set), :mod:`arms` (what is compared), :mod:`runner` (fresh server per
arm, interleaved repetitions), :mod:`speculative_cli` (llama-speculative cross-check),
:mod:`quantize` (cheaper drafts), :mod:`ceiling` (hardware ceiling and prediction), :mod:`stats`,
:mod:`identity`, :mod:`analysis`, :mod:`recommend`, :mod:`report`, :mod:`inventory`, :mod:`summary`.
"""
