"""Effect adapters: deliver one outbox row, keyed by its idempotency key."""

from __future__ import annotations

from typing import Protocol

from automation.models import Effect


class EffectAdapter(Protocol):
    def deliver(self, effect: Effect) -> str:
        """Perform the effect at most once per key; return a reference to what was done."""
        ...


def get_adapter(name: str) -> EffectAdapter:
    from automation.effects.local import LOCAL_ADAPTERS

    return LOCAL_ADAPTERS[name]
