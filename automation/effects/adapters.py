"""Which adapter delivers an effect: its HTTP adapter where the settings name one, else its
local one."""

from __future__ import annotations

from automation.effects.base import EffectAdapter
from automation.effects.http import http_adapter_for
from automation.effects.local import LOCAL_ADAPTERS


def get_adapter(name: str) -> EffectAdapter:
    """The effect's HTTP adapter where GATEHOUSE["HTTP_EFFECTS"] names it, else its local one."""
    return http_adapter_for(name) or LOCAL_ADAPTERS[name]
