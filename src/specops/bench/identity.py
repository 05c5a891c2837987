"""Output identity: every task's text compared byte for byte with a reference run.

For each difference the position of the first diverging byte (of the UTF-8 encoding) is recorded,
with a short excerpt of both sides, so a reader can see whether a run diverged at token 3 or at
token 180 (a late near-tie flip looks very different from a broken setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specops.textdiff import first_difference


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
