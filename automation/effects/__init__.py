"""Effect adapters: deliver one outbox row, keyed by its idempotency key.

Local adapters write their record inside the console's own transaction, so delivery and
completion commit together. Remote adapters (HTTP) are called outside any transaction, under
a lease, and report what happened as a Delivery; the outbox decides what to do with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from automation.models import DeliveryResult, Effect


@dataclass(frozen=True)
class Delivery:
    """What one attempt came to."""

    outcome: DeliveryResult
    reference: str = ""
    status_code: int | None = None
    retry_after: float | None = None  # seconds, from the receiver's Retry-After
    body: str = ""
    error_class: str = ""
    detail: str = ""


class EffectAdapter(Protocol):
    local: bool
    honours_idempotency_keys: bool
    max_attempts: int
    deadline_seconds: float

    def deliver(self, effect: Effect) -> Delivery:
        """Perform the effect at most once per key (local) or send it once (remote)."""
        ...


def get_adapter(name: str) -> EffectAdapter:
    from automation.effects.http import http_adapter_for
    from automation.effects.local import LOCAL_ADAPTERS

    return http_adapter_for(name) or LOCAL_ADAPTERS[name]
