"""Where two outputs part: shared by the bench's identity check (bytes) and the soak's drift check (chars)."""

from __future__ import annotations

from collections.abc import Sequence


def first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    """Index of the first differing element; ``None`` when equal.

    When one is a prefix of the other, the difference is at the shorter one's length.
    """
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
