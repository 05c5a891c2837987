"""Every difference from plain decoding explained (issue 78), against a real plain llama-server (SmolLM2-135M):

- the host's batch spread is measured: positions of plain decoding's own answer scored as a batch (the slot's cache
  wound back, so the server evaluates several tokens at once) and by one-token decoding;
- a stand-in for a speculative answer that accepted a wrong token where plain decoding's choice was clear (its
  answer with one token replaced by a low-ranked one at a confident position) is named a **change**, with the
  token, both log-probabilities and the gap, and disqualifies under both rules;
- an answer that takes plain decoding's second choice where the top two are closest is judged against the measured
  spread (near-tie within it, change beyond it), with the log-probabilities the server itself gives there.
"""

from __future__ import annotations

import httpx
import pytest

from specops.bench import explain, identity
from specops.bench.tasks import load_tasks

pytestmark = pytest.mark.integration


def _plain(start_server) -> tuple[explain.Scorer, list[dict[str, str]], str]:
    server = start_server(spec_type="none", ctx_size=2048)
    http = httpx.Client(base_url=server.base_url, timeout=120)
    task = next(t for t in load_tasks() if t.workload == "prose")
    messages = task.chat_messages()
    r = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 64, "temperature": 0,
                                                "cache_prompt": False})
    r.raise_for_status()
    return explain.Scorer(http), messages, r.json()["choices"][0]["message"]["content"]


def test_a_wrong_token_where_plain_decoding_was_sure_is_a_change_and_a_close_call_is_judged_by_the_spread(
        start_server) -> None:
    scorer, messages, text = _plain(start_server)
    spread = explain.batch_spread(scorer, [(messages, text)], stride=6, per_answer=6)
    assert spread.positions >= 3 and spread.answers == 1 and spread.nats >= 0
    assert spread.nats == max(spread.moves)

    prompt = scorer.prompt(messages)
    toks = scorer.tokens(text)
    ids = [i for i, _ in toks]
    own = {k: scorer.both_ways(prompt, ids, k) for k in range(1, min(len(ids), 40))}
    scored = {k: pair[1] for k, pair in own.items() if pair is not None}
    assert len(scored) >= 10

    def gap(s: explain.Scored) -> float:
        a, b = s.best(2)
        return a[1] - b[1]

    # a confident position: plain decoding's choice clear by far more than the batch spread
    sure = max(scored, key=lambda k: gap(scored[k]))
    assert gap(scored[sure]) > spread.nats + 1.0
    prefix = "".join(p for _, p in toks[:sure])
    d = None
    for _, (low_piece, _) in sorted(scored[sure].top.items(), key=lambda kv: kv[1][1])[:-2]:
        d = explain.explain(scorer, "prose-x", messages, text, prefix + low_piece, spread)
        if d.token_index == sure:  # (a piece that merges with its neighbours when tokenized again: the next one)
            break
    assert d is not None and d.token_index == sure, "no low-ranked token tokenizes on its own after the prefix"
    assert d.verdict == identity.CHANGE, d.line()
    assert d.plain_token == toks[sure][1] and d.other_token == low_piece
    assert d.plain_logprob == pytest.approx(scored[sure].logprob(ids[sure]), abs=1e-3)
    assert d.gap is not None and d.gap > spread.nats
    assert "change" in d.line() and repr(low_piece) in d.line()
    rec = {"task_id": "prose-x", "explained": d.to_dict()}
    assert identity.holds("equivalent", 4, 3, [rec]) is False and identity.holds("identical", 4, 3, [rec]) is False

    # the closest call: plain decoding's second choice there, judged against the spread
    close = min(scored, key=lambda k: gap(scored[k]))
    (_, _), (second_piece, second_lp) = scored[close].best(2)
    other = "".join(p for _, p in toks[:close]) + second_piece
    d2 = explain.explain(scorer, "prose-y", messages, text, other, spread)
    if d2.token_index != close:  # the second choice's piece merged with its neighbour when tokenized again
        pytest.skip(f"the second choice {second_piece!r} does not tokenize on its own after the prefix")
    assert d2.other_logprob == pytest.approx(second_lp, abs=1e-3)
    assert d2.verdict == (identity.NEAR_TIE if d2.gap is not None and d2.gap <= spread.nats else identity.CHANGE)
    assert identity.holds("equivalent", 2, 1, [{"explained": d2.to_dict()}]) is (d2.verdict == identity.NEAR_TIE)
