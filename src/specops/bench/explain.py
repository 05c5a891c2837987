"""Every difference from plain decoding explained (issue 78): where two answers part, plain decoding's own
log-probabilities of both tokens there, and whether the difference is a **near-tie** or a **change**.

Why a speculative answer can differ from plain decoding's at all: the target verifies a draft as a *batch* of
tokens, and a batch is computed with other kernels than one-token decoding (ggml-cpu's repacked ``gemm`` for 4 rows
and more, the tiled K-quant matmul for 8 and more, flash attention's split-KV path for one query token only). The
logits move a little; where plain decoding's top two choices are closer than that, the other one can win. That is
a **near-tie**. A difference where plain decoding's choice was clear by more than a batch can move it is a
**change**: a defect of the speculation type (an accepted draft token the target did not choose), never served.

The line between them is measured on the host, on the same server (:func:`batch_spread`): plain decoding's own
answers decoded again with their log-probabilities (one token at a time, as plain decoding computed them), and the
same positions scored as a speculative server's verification computes them (its cache built in batches of about
``stride`` tokens, each position the last row of its batch). The spread is the largest move of a log-probability
*difference* between two of the top tokens over every probed position: a near-tie flips only when the batches move
the difference of the two tokens past their gap. (The cache's history matters as much as the last batch: the same
position scored after a prefix built in batches of 8 and after one built token by token moved by up to 0.1 nats on
SmolLM2, and which of two close tokens led changed.)

Everything here talks to a **plain** llama-server (``--spec-type none``) over HTTP: ``/apply-template`` (the chat
prompt as the server renders it), ``/tokenize`` (the answers' tokens) and ``/completion`` with ``n_probs`` (the
log-probabilities of the top tokens before sampling, from the full softmax). A server that lacks one of them (an
older build, a stand-in) leaves the difference *unexplained*, and says why: an unexplained difference counts as a
change under every rule that judges identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from specops.bench.identity import CHANGE, NEAR_TIE, UNEXPLAINED
from specops.client import LlamaServerClient, ServerError
from specops.textdiff import first_difference

TOP_N = 20  # the top tokens asked for at a position (the other token is usually among them)
STRIDE = 8  # probe every this many tokens: the batch scored is about this many rows (gemm and tiled paths)
MAX_POSITIONS = 12  # probed positions per answer, at most


class ExplainError(RuntimeError):
    """The server cannot explain a difference (an endpoint missing or refused): the message says which."""


@dataclass(frozen=True)
class Scored:
    """Log-probabilities of the top tokens at one position: ``{token id: (piece, logprob)}``."""

    top: dict[int, tuple[str, float]]
    chosen: int | None = None  # the token greedy decoding chose there

    def logprob(self, tok: int) -> float | None:
        hit = self.top.get(tok)
        return None if hit is None else hit[1]

    @property
    def floor(self) -> float:
        """The lowest log-probability listed: a token not listed has less."""
        return min(lp for _, lp in self.top.values())

    def best(self, n: int = 5) -> list[tuple[str, float]]:
        return sorted(self.top.values(), key=lambda pl: -pl[1])[:n]


@dataclass(frozen=True)
class Spread:
    """How far a verifying batch moves plain decoding's log-probabilities on this host: the largest move of the
    difference between two of the top tokens, batch against one-token decoding, over ``positions`` positions of
    ``answers`` answers (each position's own move in ``moves``)."""

    nats: float
    positions: int
    answers: int
    moves: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"nats": round(self.nats, 4), "positions": self.positions, "answers": self.answers,
                "moves": [round(m, 4) for m in self.moves]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spread:
        return cls(float(d["nats"]), int(d["positions"]), int(d["answers"]), tuple(d.get("moves") or ()))


@dataclass(frozen=True)
class Difference:
    """One answer that differs from plain decoding's, explained (or not: ``verdict`` unexplained, ``why``)."""

    task: str
    verdict: str
    why: str = ""
    token_index: int | None = None  # where the answers part, in plain decoding's tokens
    byte_pos: int | None = None
    plain_token: str | None = None
    other_token: str | None = None
    plain_logprob: float | None = None  # plain decoding's own (one-token decoding at that position)
    other_logprob: float | None = None  # None: not among plain's top TOP_N (below ``floor``)
    floor: float | None = None
    batch: dict[str, float | None] = field(default_factory=dict)  # both tokens as a batch scores them there
    top: tuple[tuple[str, float], ...] = ()  # plain decoding's top choices there
    spread: float | None = None  # the host's batch spread it was judged against (nats)

    @property
    def gap(self) -> float | None:
        """How much plain decoding preferred its token (nats); a lower bound where the other was not listed."""
        if self.plain_logprob is None:
            return None
        other = self.other_logprob if self.other_logprob is not None else self.floor
        return None if other is None else self.plain_logprob - other

    def line(self) -> str:
        """The difference in one line, as the record and the deploy's output say it."""
        if self.verdict == UNEXPLAINED:
            return f"{self.task}: output differs from plain decoding's (unexplained: {self.why})"
        other = (f"{self.other_logprob:.3f}" if self.other_logprob is not None
                 else f"< {self.floor:.3f} (not in its top {TOP_N})")
        gap = self.gap or 0.0
        judged = (f"{'within' if self.verdict == NEAR_TIE else 'beyond'} the host's batch spread "
                  f"{self.spread:.3f}" if self.spread is not None else "no batch spread measured")
        return (f"{self.task}: at token {self.token_index} wrote {self.other_token!r} where plain decoding wrote "
                f"{self.plain_token!r}; plain decoding's log-probabilities {self.plain_logprob:.3f} and {other}, "
                f"{'at least ' if self.other_logprob is None else ''}{gap:.3f} nats apart, {judged}: {self.verdict}")

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d["top"] = [list(t) for t in self.top]
        d["gap"] = None if self.gap is None else round(self.gap, 4)
        d["line"] = self.line()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Difference:
        keep = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        keep["top"] = tuple(tuple(t) for t in keep.get("top") or ())
        return cls(**keep)


def judge(gap: float | None, spread: Spread | None) -> str:
    """near-tie when plain decoding's preference is within what a batch moves it, else change."""
    if gap is None or spread is None:
        return UNEXPLAINED
    return NEAR_TIE if gap <= spread.nats else CHANGE


class Scorer:
    """Asks a plain llama-server for its prompt, tokens and log-probabilities."""

    def __init__(self, client: LlamaServerClient, timeout: float = 600.0) -> None:
        self.client = client
        self.timeout = timeout

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return self.client.post(path, body, timeout=self.timeout)
        except (ServerError, httpx.HTTPError) as exc:
            raise ExplainError(str(exc).splitlines()[0][:200] or f"POST {path}: {type(exc).__name__}") from exc

    def prompt(self, messages: Sequence[dict[str, str]]) -> str:
        out = self._post("/apply-template", {"messages": list(messages)})
        if not isinstance(out, dict) or not isinstance(out.get("prompt"), str):
            raise ExplainError("/apply-template: no prompt in the answer")
        return out["prompt"]

    def tokens(self, text: str) -> list[tuple[int, str]]:
        """The text's tokens with their pieces (no special tokens added)."""
        out = self._post("/tokenize", {"content": text, "add_special": False, "with_pieces": True})
        toks = out.get("tokens") if isinstance(out, dict) else None
        if not isinstance(toks, list):
            raise ExplainError("/tokenize: no tokens in the answer")
        res: list[tuple[int, str]] = []
        for t in toks:
            if isinstance(t, dict) and isinstance(t.get("id"), int):
                piece = t.get("piece")
                text = piece if isinstance(piece, str) else bytes(piece or []).decode("utf-8", "replace")
                res.append((t["id"], text))
            elif isinstance(t, int):
                res.append((t, ""))
            else:
                raise ExplainError("/tokenize: unexpected token entry")
        return res

    def score(self, prompt: str, ids: Sequence[int], n_predict: int, cache: bool = True) -> list[Scored]:
        """Greedy ``n_predict`` tokens after ``prompt`` + ``ids``, with the top log-probabilities at each (the
        token each step chose is the one listed first). ``cache``: what the slot holds of the prompt is not evaluated
        again (that is how a batch of chosen size is made); without it the prompt is evaluated whole."""
        body = {"prompt": [prompt, *ids], "n_predict": n_predict, "n_probs": TOP_N, "temperature": 0.0,
                "cache_prompt": cache, "post_sampling_probs": False}
        out = self._post("/completion", body)
        probs = out.get("completion_probabilities") if isinstance(out, dict) else None
        if not isinstance(probs, list) or not probs:
            raise ExplainError("/completion: no completion_probabilities (n_probs) in the answer")
        res: list[Scored] = []
        for p in probs:
            top = {}
            for t in p.get("top_logprobs") or []:
                if isinstance(t.get("id"), int) and isinstance(t.get("logprob"), (int, float)):
                    top[t["id"]] = (str(t.get("token", "")), float(t["logprob"]))
            if not top:
                raise ExplainError("/completion: no top_logprobs (a build without log-probabilities)")
            res.append(Scored(top, p.get("id") if isinstance(p.get("id"), int) else None))
        return res

    def own(self, prompt: str, ids: Sequence[int], upto: int) -> list[Scored]:
        """Plain decoding's own log-probabilities at positions 0..``upto`` of its answer ``ids``: the answer decoded
        again from the prompt alone (evaluated whole, then one token at a time, as plain decoding did), with
        ``n_probs``. Refused where it no longer follows the answer (a server that is not the one that wrote it)."""
        got = self.score(prompt, [], upto + 1, cache=False)
        chosen = [g.chosen for g in got]
        if chosen[: upto + 1] != list(ids[: upto + 1]):
            at = next((i for i, (a, b) in enumerate(zip(chosen, ids, strict=False)) if a != b), len(chosen))
            raise ExplainError(f"plain decoding did not write its answer again (it parts at token {at}): not the "
                               "server, or not the settings, that wrote it")
        return got

    def batched(self, prompt: str, ids: Sequence[int], ends: Sequence[int]) -> dict[int, Scored]:
        """The answer's positions ``ends`` (ascending) scored as a speculative server's verification does: its
        cache built in batches (the prompt whole, then the answer in batches between consecutive ends), each end
        the last row of its batch."""
        out: dict[int, Scored] = {}
        self.score(prompt, [], 1, cache=False)  # the slot holds this prompt alone (evaluated whole)
        for e in ends:
            out[e] = self.score(prompt, ids[:e], 1)[0]
        return out


def move(a: Scored, b: Scored, n: int = 5) -> float | None:
    """How far ``b`` moved the log-probability differences of ``a``'s top ``n`` tokens (those both list)."""
    shared = [tok for tok, _ in sorted(a.top.items(), key=lambda kv: -kv[1][1])[:n] if tok in b.top]
    if len(shared) < 2:
        return None
    deltas = [a.top[t][1] - b.top[t][1] for t in shared]
    return max(deltas) - min(deltas)


def ends(k: int, stride: int = STRIDE) -> list[int]:
    """Batch ends from the start of the answer to position ``k`` (>= 1), every ``stride`` tokens, ending at k."""
    first = k % stride or stride
    return list(range(first, k + 1, stride))


def batch_spread(scorer: Scorer, answers: Sequence[tuple[Sequence[dict[str, str]], str]],
                 stride: int = STRIDE, per_answer: int = MAX_POSITIONS) -> Spread:
    """The host's batch spread over plain decoding's own ``answers`` (messages, text): the answer decoded again
    with its log-probabilities (one token at a time, :meth:`Scorer.own`), and scored as a verification builds its
    cache (batches of ``stride`` tokens, :meth:`Scorer.batched`) at the end of each batch (at most ``per_answer``
    of them)."""
    moves: list[float] = []
    used = 0
    for messages, text in answers:
        prompt = scorer.prompt(messages)
        ids = [i for i, _ in scorer.tokens(text)]
        at = list(range(stride, len(ids), stride))[:per_answer]
        if not at:
            continue
        try:
            own = scorer.own(prompt, ids, at[-1])
        except ExplainError:
            continue  # its retokenized text is not what it decoded (or no longer decodes): another answer
        batch = scorer.batched(prompt, ids, at)
        got = [m for m in (move(own[k], batch[k]) for k in at) if m is not None]
        moves.extend(got)
        used += 1 if got else 0
    if not moves:
        raise ExplainError("no position could be scored both ways")
    return Spread(max(moves), len(moves), used, tuple(moves))


def explain(scorer: Scorer, task: str, messages: Sequence[dict[str, str]], plain: str, other: str,
            spread: Spread | None, stride: int = STRIDE) -> Difference:
    """One difference explained against plain decoding (the server ``scorer`` talks to), judged against the larger
    of the run's batch spread (``spread``) and this task's own: plain decoding's answer scored both ways at every
    ``stride``-th position through the parting token and on to its end (the numerics move with the context: past 256
    cells one-token decoding takes flash attention's split-KV path and a batch does not, so a short prompt's spread
    says nothing of a long one's)."""
    try:
        prompt = scorer.prompt(messages)
        a, b = scorer.tokens(plain), scorer.tokens(other)
        k = first_difference([i for i, _ in a], [i for i, _ in b])
        if k is None:
            return Difference(task, UNEXPLAINED, "the two answers tokenize the same")
        if k >= len(a) or k >= len(b):
            return Difference(task, UNEXPLAINED, f"one answer stops at token {k} where the other goes on",
                              token_index=k)
        ids = [i for i, _ in a]
        at = [*ends(k, stride), *range(k + stride, len(ids), stride)] if k >= 1 else []
        own = scorer.own(prompt, ids, max([k, *at]))
        batch = scorer.batched(prompt, ids, at) if at else {}
    except ExplainError as exc:
        return Difference(task, UNEXPLAINED, str(exc))
    moves = [m for m in (move(own[e], batch[e]) for e in at) if m is not None]
    here = Spread(max(moves), len(moves), 1, tuple(moves)) if moves else None
    used = max((x for x in (spread, here) if x is not None), key=lambda x: x.nats, default=None)
    at_k = own[k]
    in_batch = batch.get(k, at_k)
    byte_pos = len("".join(p for _, p in a[:k]).encode("utf-8"))
    plain_lp, other_lp = at_k.logprob(a[k][0]), at_k.logprob(b[k][0])
    d = Difference(task, UNEXPLAINED, token_index=k, byte_pos=byte_pos, plain_token=a[k][1], other_token=b[k][1],
                   plain_logprob=plain_lp, other_logprob=other_lp, floor=at_k.floor,
                   batch={"plain": in_batch.logprob(a[k][0]), "other": in_batch.logprob(b[k][0]),
                          "task_spread": here.nats if here else None, "positions": here.positions if here else 0},
                   top=tuple(at_k.best()), spread=used.nats if used else None)
    if plain_lp is None:
        return Difference(**{**d.__dict__, "why": "plain decoding's own token is not among its top choices there"})
    return Difference(**{**d.__dict__, "verdict": judge(d.gap, used),
                         "why": "" if used else "no batch spread measured on this host"})
