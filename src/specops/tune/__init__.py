"""specops tune: find the speculation profile that pays on this host (candidates, prediction, measurement).

The pipeline is :mod:`specops.tune.pipeline`, one module per step (prepare, price, probes, predict, measure,
choose, slots, result), sharing :class:`specops.tune.state.Setup`.
"""
