"""Effect adapters: deliver one outbox row, keyed by its idempotency key.

Local adapters write their record inside the console's own transaction, so delivery and
completion commit together. Remote adapters (HTTP) are called outside any transaction, under
a lease, and report what happened as a Delivery; the outbox decides what to do with it.
"""

from __future__ import annotations

from automation.effects.base import EffectAdapter
from automation.effects.http import http_adapter_for
from automation.effects.local import LOCAL_ADAPTERS


def get_adapter(name: str) -> EffectAdapter:
    """The effect's HTTP adapter where GATEHOUSE["HTTP_EFFECTS"] names it, else its local one."""
    return http_adapter_for(name) or LOCAL_ADAPTERS[name]
