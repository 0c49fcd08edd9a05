"""What an effect adapter is and what one delivery attempt comes to.

Adapters (local.py, http.py) import this module, never the package that chooses among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from automation.effects.models import DeliveryResult, Effect


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
