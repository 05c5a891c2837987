"""Shares of requests weighed by plain decoding's time (issue 62 item 4): a mix's w_k are shares of requests, and a
workload whose requests take longer takes more of the service's time, so each task weighs by its own plain decode
seconds where the blocks recorded them; the record shows the arithmetic with the shares of time."""

from __future__ import annotations

import math

import pytest

from specops.bench import weighted
from specops.bench.arms import AA, BASELINE
from specops.bench.design import Block, Design
from specops.tune.evidence import Blocks

pytestmark = pytest.mark.fast

MOD = "exact-ngram-mod"


def block(i: int, wl: str, task: str, ratio: float, seconds: float, tokens: int = 96) -> dict:
    """A block whose plain request decodes ``tokens`` in ``seconds`` and whose candidate runs ``ratio`` as fast."""
    base = tokens / seconds
    return {"index": i, "rep": 0, "workload": wl, "task": task, "arms": [BASELINE, AA, MOD],
            "results": {BASELINE: {"decode_tps": base, "n_predicted": tokens},
                        AA: {"decode_tps": base, "n_predicted": tokens},
                        MOD: {"decode_tps": base * ratio, "n_predicted": tokens}}}


def rows(edit_s: float, prose_s: float) -> list[dict]:
    out = []
    for i, r in enumerate((1.30, 1.40, 1.20, 1.35)):
        out.append(block(2 * i, "edit", f"e{i}", r, edit_s))
        out.append(block(2 * i + 1, "prose", f"p{i}", (0.95, 1.0, 0.97, 0.99)[i], prose_s))
    return out


def test_timed_and_time_shares() -> None:
    ratios = {"edit": {"e1": 2.0, "e2": 1.0}, "prose": {"p1": 1.0}}
    secs = {"edit": {"e1": 10.0, "e2": 10.0}, "prose": {"p1": 4.0}}
    times = weighted.timed(ratios, secs)
    assert times == {"edit": [(5.0, 10.0), (10.0, 10.0)], "prose": [(4.0, 4.0)]}
    assert weighted.time_shares(times, {"edit": 0.5, "prose": 0.5}) == pytest.approx({"edit": 10 / 14, "prose": 4 / 14})
    # one task's seconds missing: every request counts as the same time, as before
    assert weighted.timed(ratios, {"edit": secs["edit"]}) == {"edit": [(0.5, 1.0), (1.0, 1.0)], "prose": [(1.0, 1.0)]}


def test_longer_requests_weigh_more_and_the_record_says_so() -> None:
    """Edits twice as long as prose requests: at 50/50 requests, edits are 2/3 of plain decoding's time and the mix's
    figure leans toward the edits' gain; with equal times it is the request shares' figure."""
    mix = {"edit": 0.5, "prose": 0.5}
    same = Blocks(rows(5.0, 5.0))
    longer = Blocks(rows(10.0, 5.0))
    even, leaning = same.mix_interval(MOD, BASELINE, mix), longer.mix_interval(MOD, BASELINE, mix)
    assert even is not None and leaning is not None
    edit_h = 4 / sum(1 / r for r in (1.30, 1.40, 1.20, 1.35))
    prose_h = 4 / sum(1 / r for r in (0.95, 1.0, 0.97, 0.99))
    assert even.estimate == pytest.approx(1 / (0.5 / edit_h + 0.5 / prose_h))
    assert leaning.estimate == pytest.approx(1 / (2 / 3 / edit_h + 1 / 3 / prose_h))
    text = longer.mix_arithmetic(MOD, BASELINE, mix)
    assert text.startswith("1 / (0.67/") and "edit 50% at 10.0 s, prose 50% at 5.0 s" in text, text
    recorded = Blocks([{**b, "results": {a: {"decode_tps": r["decode_tps"]} for a, r in b["results"].items()}}
                       for b in rows(10.0, 5.0)])  # blocks that kept only their rates (the committed fixtures)
    assert recorded.mix_interval(MOD, BASELINE, mix).estimate == pytest.approx(even.estimate)  # type: ignore[union-attr]
    assert "every request counted as the same time" in recorded.mix_arithmetic(MOD, BASELINE, mix)


def test_the_design_weighs_its_whole_figure_by_the_same_seconds() -> None:
    """The measurement's stops and the choice read one figure: the design's whole figure equals the record's."""
    d = Design([MOD], {"edit": [f"e{i}" for i in range(4)], "prose": [f"p{i}" for i in range(4)]}, min_tasks=3,
               shares={"edit": 0.5, "prose": 0.5})
    data = rows(10.0, 5.0)
    for rec in data:
        b = Block(rec["index"], 0, rec["workload"], rec["task"], tuple(rec["arms"]))
        d.add(b, {a: r["decode_tps"] for a, r in rec["results"].items()},
              plain_s=weighted.request_seconds(rec["results"][BASELINE]))
    whole = d.whole(MOD)
    fig = Blocks(data).mix_interval(MOD, BASELINE, {"edit": 0.5, "prose": 0.5})
    assert whole is not None and fig is not None
    assert whole.estimate == pytest.approx(fig.estimate) and not math.isclose(whole.estimate, 1.0)
