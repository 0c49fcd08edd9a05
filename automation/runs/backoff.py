"""How long a run's retries wait: a classifier call's and an effect's, on core.backoff's one
rule, with the bases and caps of the settings (GATEHOUSE_RETRY_BACKOFF_BASE and _CAP)."""

from __future__ import annotations

from automation.conf import setting
from core.backoff import backoff_delay


def retry_delay(attempt: int) -> float:
    """Seconds before the next attempt of a run's step, `attempt` attempts in."""
    return backoff_delay(
        attempt,
        base=setting("RETRY_BACKOFF_BASE_SECONDS"),
        cap=setting("RETRY_BACKOFF_CAP_SECONDS"),
    )
