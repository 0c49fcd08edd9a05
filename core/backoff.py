"""When to try again: the one backoff of the product, exponential with full jitter.

Every retry that waits (a classifier call, an effect's delivery, a mailbox watcher's
reconnection, a notification) waits `backoff_delay(attempt, base=..., cap=...)` seconds: a
random time between nothing and `base * 2**attempt`, at most `cap` (AWS's "full jitter"), so
many runs failing at once do not all come back at once. The bases and caps are each caller's
settings; `jitter` spreads a wait that is not a backoff (a breaker's cooling) the same way.
"""

from __future__ import annotations

import random

# 2**32 times any base is past every cap: a larger exponent only risks a float overflow.
MAX_EXPONENT = 32


def backoff_delay(attempt: int, *, base: float, cap: float) -> float:
    """Seconds to wait before attempt `attempt + 1` (`attempt` counts from 0): full jitter
    over min(cap, base * 2**attempt)."""
    exponent = min(max(attempt, 0), MAX_EXPONENT)
    return jitter(min(float(cap), float(base) * 2**exponent))


def jitter(seconds: float) -> float:
    """A random time between nothing and `seconds`."""
    return random.uniform(0, max(seconds, 0.0))  # noqa: S311 - a spread, not a secret
