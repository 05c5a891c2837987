"""Exponential backoff between retries of one request."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """``initial * factor**(n-1)`` seconds before retry ``n`` (1-based), capped at ``max_delay``.

    ``jitter`` (0..1) shortens each delay by up to that fraction, so workers that failed together
    do not retry in lockstep. ``give_up_after`` bounds the total time one request may spend retrying.
    """

    initial: float = 0.5
    factor: float = 2.0
    max_delay: float = 10.0
    jitter: float = 0.2
    max_attempts: int = 50
    give_up_after: float = 300.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.factor < 1 or self.max_delay < self.initial:
            raise ValueError("backoff needs initial > 0, factor >= 1 and max_delay >= initial")
        if not 0 <= self.jitter < 1:
            raise ValueError("backoff jitter must be within [0, 1)")
        if self.max_attempts < 1 or self.give_up_after <= 0:
            raise ValueError("backoff needs max_attempts >= 1 and give_up_after > 0")

    def base_delay(self, retry: int) -> float:
        if retry < 1:
            raise ValueError("retry numbers start at 1")
        # cap the exponent first: factor**retry overflows long before max_delay matters
        exp = min(retry - 1, 64)
        return min(self.max_delay, self.initial * self.factor**exp)

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        base = self.base_delay(retry)
        if not self.jitter or rng is None:
            return base
        return base * (1.0 - self.jitter * rng.random())
