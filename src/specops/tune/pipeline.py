"""The tune, top-down (:func:`tune`): from the checked settings to the result, one step per module.

1. :mod:`~specops.tune.prepare`: the build, the models, the candidates, the tasks, the memory fit (the Setup)
2. :mod:`~specops.tune.price`: llama-bench prices a verification batch and a draft step; the ceiling's pruning
3. :mod:`~specops.tune.probes`: one short server per kind of candidate, plain decoding before and after
4. :mod:`~specops.tune.predict`: every candidate predicted, the shortlist
5. :mod:`~specops.tune.measure`: the shortlist side by side with plain decoding (the bench's library)
6. :mod:`~specops.tune.choose`: the choice from the paired blocks
7. :mod:`~specops.tune.slots`: at the service's N streams (``--parallel`` N > 1)
8. :mod:`~specops.tune.result`: the record, and its model for the live check

:func:`watched` runs it beside a live service (:mod:`~specops.tune.quiet`), :func:`reusable` says when an earlier
record stands instead, :func:`shared` when another host's record of this host's kind does, :func:`keep` writes the
record; all on the leash (:mod:`~specops.tune.leash`). The steps read a frozen :class:`~specops.tune.state.Setup`
and return what they found, what stays open among it; this spine carries it to the record.
``specops tune`` (:mod:`specops.commands.tune`) is the command line around them.
"""

from __future__ import annotations

import argparse
from typing import Any

from specops.client import LlamaServerClient
from specops.paths import write_whole
from specops.tune import choose, measure, predict, price, probes, quiet, record, result, slots
from specops.tune.state import Setup


def tune(s: Setup, args: argparse.Namespace, retuned: list[str] | None = None) -> dict[str, Any]:
    """Ceiling, probes, predictions, the side-by-side measurement and the choice: the result (TuneError for what
    stops it before a choice can be made). Each step returns what it found, what stays open among it; ``retuned``:
    what moved since the --reuse result (:func:`reusable`)."""
    s.progress.note(f"tune: {len(s.names)} candidates ({', '.join(s.names)}), budget {args.budget:g} min; "
                    f"work in {s.work}")
    s.meter.update("ceiling", f"llama-bench prices a verification batch and a draft step ({len(s.names)} "
                   "candidates)", s.left())
    costs, ceiling_data = price.ceiling(s, args)
    s.store.save_json("ceiling.json", ceiling_data)
    t = s.phase("ceiling", s.started)
    pruned, open_ = price.pruned(s, args, costs)
    probed = probes.run_probes(s, [n for n in s.names if n not in pruned])
    found = probed.found
    t = s.phase("probes", t)
    over, preds, said = predict.predict(s, costs, found, pruned)
    short = predict.shortlist(s, args, preds)
    open_ += [*probed.open, *said, *short.open]
    bench = None
    if short.measured and not args.predict_only:
        plain_s = found[probes.PLAIN_ARM].run.seconds_per_token
        bench, said = measure.measure(s, args, short.measured, plain_s, short.reserve)
        open_ += said
        t = s.phase("measure", t)
    s.meter.update("choose", "from the paired blocks" if bench is not None else "nothing measured", s.left())
    measured, choice, per_wl, open_ = choose.choose(s, args, bench, short, open_)
    at_n = None
    if args.parallel > 1 and measured:
        at_n, choice, said = slots.at_n(s, args, choice, measured, found[probes.PLAIN_ARM].run.seconds_per_token)
        open_ += said
        s.phase("streams", t)
    live_model, said = result.live_model(s, costs, over, choice.chosen, measured, (bench or {}).get("blocks") or ())
    return result.result(s, args, result.Found(over, preds, short, measured, choice, per_wl, found, probed.drift,
                                               [*open_, *said], retuned or [], bench, live_model, at_n))


def watched(s: Setup, args: argparse.Namespace, retuned: list[str] | None = None
            ) -> tuple[dict[str, Any] | None, str]:
    """The tune, beside the live service of --service-url when given: waits (bounded) for it to be idle and
    watches it throughout. Returns (result, why unproven: '' when the figures stand)."""
    if not args.service_url:
        return tune(s, args, retuned), ""
    with LlamaServerClient(args.service_url, api_key=quiet.read_key(args.api_key_file) or None) as client:
        s.meter.update("waiting", f"for the service at {args.service_url} to be idle", s.left())
        idle, waited = quiet.wait_idle(client, args.idle_timeout)
        if not idle:
            return None, (f"the service at {args.service_url} stayed busy for {waited:.0f} s "
                          f"(--idle-timeout {args.idle_timeout:g}): not tuned beside its traffic")
        with quiet.Watch(client) as watch:
            out = tune(s, args, retuned)
    if watch.blind_note():
        out["open"] = [*out["open"], watch.blind_note()]
    return out, watch.contended()


def reusable(s: Setup, args: argparse.Namespace) -> tuple[dict[str, Any] | None, list[str]]:
    """--reuse: the earlier result, where nothing it depends on moved; else None and what moved (said, and kept for
    the record: ``retuned_because``) and the tune runs. With --own-only, a result shared from another host (--shared)
    does not stand either."""
    old = record.previous(args.reuse)
    if old is None:
        return None, []
    if getattr(args, "own_only", False) and old.get("shared"):
        s.progress.note(f"tune: the result of {old.get('when', '?')} was tuned on {old['shared'].get('from')} and "
                        "shared (--own-only): tuning here")
        return None, ["it was shared from another host"]
    moved = record.changed(old.get("facts") or {}, s.facts)
    if old["key"] == record.key(s.facts) and not moved:
        return old, []
    s.progress.note(f"tune: the result of {old.get('when', '?')} is stale ({', '.join(moved) or 'its key'} changed): "
                    "tuning again")
    return None, moved or ["the key"]


def shared(s: Setup, args: argparse.Namespace, current: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """--shared: another host's record, adopted as this host's own (:func:`specops.tune.record.adopt`) where it is of
    this host's kind, computed here the same way (:func:`specops.tune.record.kind`); else None, why said in one line.
    ``current``: the host's own result that stands, itself shared earlier: replaced by a newer record of its kind (a
    host that tuned the kind again), kept where the record is the one it holds already or is refused."""
    then = "tuning here" if current is None else f"keeping the result of {current.get('when', '?')}"
    theirs = record.previous(args.shared)
    if theirs is None:
        print(f"shared: no tune record at {args.shared}: {then}", flush=True)
        return None
    if current is not None and record.same_source(current, theirs):
        return None
    mine = record.kind(s.facts, args)
    why = record.refusal(theirs, mine)
    if why:
        print(f"shared: the record at {args.shared} (tuned on {theirs.get('tuned_on') or 'another host'}) is not "
              f"used: {why}; {then}", flush=True)
        return None
    return record.adopt(theirs, s.facts, mine, args.shared)


def keep(s: Setup, args: argparse.Namespace, text: str, unproven: str) -> None:
    """The result in the work dir's tune.json and, unless unproven, --out: written only while the deploy that
    started this tune still holds its lock (else :class:`~specops.tune.leash.Stopped`)."""
    with s.meter.leash.last_look():
        (s.work / "tune.json").write_text(text)
        if args.out and not unproven:  # an unproven result never replaces the host's record
            write_whole(args.out, text)
