"""Output identity: every task's text compared byte for byte with a reference run.

For each difference the position of the first diverging byte (of the UTF-8 encoding) is recorded,
with a short excerpt of both sides, so a reader can see whether a run diverged at token 3 or at
token 180 (a late near-tie flip looks very different from a broken setting).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specops.outputrule import DEFAULT_RULE, IDENTITY_RULES, RULES
from specops.textdiff import first_difference

__all__ = ["DEFAULT_RULE", "IDENTITY_RULES", "RULES"]


def first_divergence(a: str, b: str) -> int | None:
    """Byte offset of the first difference of the UTF-8 encodings; None when identical."""
    return first_difference(a.encode("utf-8"), b.encode("utf-8"))


def _excerpt(text: str, byte_pos: int, width: int = 24) -> str:
    raw = text.encode("utf-8")
    lo = max(0, byte_pos - width)
    return raw[lo : byte_pos + width].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Divergence:
    task_id: str
    rep: int
    byte_pos: int
    ref_len: int
    out_len: int
    ref_excerpt: str
    out_excerpt: str

    @property
    def kind(self) -> str:
        """``content`` (the texts differ at byte_pos) or ``length`` (one is a prefix of the other:
        a run that stopped earlier or later, e.g. llama-speculative overshooting ``-n``)."""
        return "length" if self.byte_pos == min(self.ref_len, self.out_len) else "content"

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__, "kind": self.kind}


@dataclass
class IdentityResult:
    """Identity of one arm against its reference over tasks × repetitions."""

    arm: str
    reference: str
    compared: int = 0
    identical: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def all_identical(self) -> bool:
        return self.compared > 0 and self.identical == self.compared and not self.missing

    @property
    def identical_tasks(self) -> set[str]:
        bad = {d.task_id for d in self.divergences}
        return set(self._tasks) - bad

    _tasks: set[str] = field(default_factory=set, repr=False)

    def to_dict(self) -> dict[str, object]:
        return {
            "arm": self.arm,
            "reference": self.reference,
            "compared": self.compared,
            "identical": self.identical,
            "all_identical": self.all_identical,
            "divergences": [d.to_dict() for d in self.divergences],
            "missing": self.missing,
        }


def compare(
    arm: str, reference: str, outputs: Mapping[int, Mapping[str, str]], ref_texts: Mapping[str, str]
) -> IdentityResult:
    """Compare ``outputs[rep][task] -> text`` with ``ref_texts[task]`` (the reference's first rep)."""
    res = IdentityResult(arm, reference)
    for rep in sorted(outputs):
        for task_id, text in outputs[rep].items():
            res._tasks.add(task_id)
            ref = ref_texts.get(task_id)
            if ref is None:
                res.missing.append(task_id)
                continue
            res.compared += 1
            pos = first_divergence(ref, text)
            if pos is None:
                res.identical += 1
            else:
                res.divergences.append(
                    Divergence(
                        task_id,
                        rep,
                        pos,
                        len(ref.encode()),
                        len(text.encode()),
                        _excerpt(ref, pos),
                        _excerpt(text, pos),
                    )
                )
    return res


def self_consistency(arm: str, outputs: Mapping[int, Mapping[str, str]]) -> IdentityResult:
    """Repetitions of one arm against its own first repetition (determinism)."""
    reps = sorted(outputs)
    if not reps:
        return IdentityResult(arm, arm)
    first = outputs[reps[0]]
    return compare(arm, f"{arm} (rep {reps[0]})", {r: outputs[r] for r in reps[1:]}, first)


# ---- the identity rules (issue 78; named in specops.outputrule) ------------------------------------------------
NEAR_TIE, CHANGE, UNEXPLAINED = "near-tie", "change", "unexplained"


def verdict_of(div: Mapping[str, object]) -> str:
    """A recorded divergence's verdict: its explanation's (``explained``), else unexplained."""
    ex = div.get("explained")
    v = ex.get("verdict") if isinstance(ex, Mapping) else None
    return v if v in (NEAR_TIE, CHANGE) else UNEXPLAINED


def counts(divergences: Sequence[Mapping[str, object]]) -> dict[str, int]:
    out = {NEAR_TIE: 0, CHANGE: 0, UNEXPLAINED: 0}
    for d in divergences:
        out[verdict_of(d)] += 1
    return out


def holds(rule: str, compared: int, identical: int, divergences: Sequence[Mapping[str, object]]) -> bool | None:
    """Does an arm's output pass ``rule`` (None: nothing compared)? ``identical`` of ``compared`` answers were
    byte-identical; ``divergences`` are the others, explained where the run could."""
    if not compared:
        return None
    if identical >= compared or rule == "fastest":
        return True
    if rule == "equivalent":
        return len(divergences) == compared - identical and all(verdict_of(d) == NEAR_TIE for d in divergences)
    return False


def rate_upper(x: int, n: int, level: float = 0.95) -> float:
    """The one-sided upper confidence bound (Clopper-Pearson) on a rate after ``x`` events in ``n`` trials."""
    if n <= 0:
        return 1.0
    if x >= n:
        return 1.0

    def cdf(p: float) -> float:  # P(X <= x) for Binomial(n, p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(x + 1))

    lo, hi = x / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if cdf(mid) > 1 - level:
            lo = mid
        else:
            hi = mid
    return hi


def bound_line(x: int, n: int, what: str = "differences", level: float = 0.95) -> str:
    """e.g. "0 of 24: fewer than 12% at 95%" (``what``: what the rate counts)."""
    if not n:
        return f"no answer checked: the rate of {what} is unknown"
    up = rate_upper(x, n, level)
    if up >= 0.995:
        return f"{x} of {n} answers ({what}): too few answers to bound the rate"
    return f"{x} of {n} answers ({what}): fewer than {math.ceil(up * 100)}% at {level:.0%}"


def summary_line(rule: str, compared: int, divergences: Sequence[Mapping[str, object]]) -> str:
    """What a rule found on an arm's answers, with the bound the count allows, in one line."""
    c = counts(divergences)
    if rule == "equivalent":
        bad = c[CHANGE] + c[UNEXPLAINED]
        extra = f"; {c[NEAR_TIE]} near-tie(s) allowed" if c[NEAR_TIE] else ""
        return bound_line(bad, compared, "changes or unexplained") + extra
    line = bound_line(len(divergences), compared)
    if rule == "identical" and divergences and c[NEAR_TIE] == len(divergences):
        # (issue 78: a verdict that turns on whether a sample holds a near-tie says so, with the rate it found)
        line += ("; every one a near-tie: this verdict depends on whether a sample holds one (under equivalent it "
                 "holds)")
    return line
