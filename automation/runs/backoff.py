"""When to try again: exponential backoff with full jitter, for classifier calls and effects."""

from __future__ import annotations

import random

from automation.conf import setting


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with full jitter, so retries of many runs do not stampede."""
    cap = min(
        setting("RETRY_BACKOFF_CAP_SECONDS"), setting("RETRY_BACKOFF_BASE_SECONDS") * 2**attempt
    )
    return random.uniform(0, cap)  # noqa: S311 - full jitter, not cryptography
