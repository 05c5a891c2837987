"""The tune's third step: the probes, one short server at a time (:func:`specops.tune.probes.probe`): plain
decoding, then what each kind's probe is (:func:`specops.kinds.probe_names`: a kind with lengths at its longest and
its shortest, the others each their own) while the probes' share of the budget lasts; then plain decoding again, to
see whether the host's speed moved meanwhile."""

from __future__ import annotations

import time

from specops import kinds
from specops.bench.costmodel import Run
from specops.tune import probes
from specops.tune.state import Setup, TuneError

MAX_DRIFT = 0.15  # the plain server's speed may move this much between the first and the last probe


def probe_names(s: Setup) -> list[str]:
    """The plain server, then each kind's probes (:func:`specops.kinds.probe_names`)."""
    return [probes.PLAIN_ARM, *kinds.probe_names(s.names, s.ngram_probes)]


def run_probes(s: Setup, names: list[str]) -> dict[str, probes.ProbeResult]:
    """The plain server and each kind's longest length always (nothing of it can be predicted without them,
    :func:`specops.kinds.essential`); the others while the probes' share of the budget lasts. ``names``: the
    candidates still in (the ceiling's pruning left out)."""
    out: dict[str, probes.ProbeResult] = {}
    essential = {probes.PLAIN_ARM, *kinds.essential(names)}
    todo = [n for n in probe_names(s) if n == probes.PLAIN_ARM or n in names]
    for i, name in enumerate(todo, 1):
        if name not in essential and time.monotonic() >= s.probe_until:
            s.open.append(f"{name}: not probed (the probes' share of the budget was spent)")
            continue
        s.meter.update("probes", f"{name} ({i}/{len(todo)})", s.left())
        out[name] = probes.probe(name, s.cfg, s.store, s.probe_tasks, s.progress.note)
    plain = out.get(probes.PLAIN_ARM)
    if plain is None or plain.error or plain.run.n_tokens <= 0:
        why = plain.error if plain else "not run"
        raise TuneError(f"the plain server could not be measured ({why}); nothing was changed")
    _bracket(s, out, plain)
    return out


def _bracket(s: Setup, out: dict[str, probes.ProbeResult], first: probes.ProbeResult) -> None:
    """The plain server once more after the other probes: the probes ran one after another, so a host whose speed
    moved meanwhile (another process's load) would skew every prediction. Both plain runs count; a drift beyond
    MAX_DRIFT is said (the side-by-side measurement, paired, is not affected)."""
    s.meter.update("probes", "plain decoding again (did the host's speed move meanwhile?)", s.left())
    again = probes.probe(probes.PLAIN_ARM, s.cfg, s.store, s.probe_tasks, s.progress.note)
    if again.error or again.run.n_tokens <= 0 or again.run.seconds <= 0:
        s.open.append(f"the plain server's second probe failed ({again.error or 'nothing generated'}): drift unknown")
        return
    s.drift = again.run.seconds_per_token / first.run.seconds_per_token - 1
    if abs(s.drift) > MAX_DRIFT:
        s.open.append(f"the plain server's speed moved {s.drift:+.0%} between the first and the last probe (other "
                      "load on the host?): the predictions are unreliable; only the side-by-side measurement decides")
    out[probes.PLAIN_ARM] = probes.ProbeResult(
        probes.PLAIN_ARM, Run(first.run.n_tokens + again.run.n_tokens, first.run.seconds + again.run.seconds),
        texts=first.texts)
