"""Typed access to the worker wing's keys of the GATEHOUSE settings block (config/settings.py).

The block's other keys are automation's (`automation.conf`); a test holds the two accessors
to the whole block, each key declared once. Read at every call, as automation's are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, cast, overload

from django.conf import settings


@overload
def setting(name: Literal["Q_STOP_GRACE"]) -> float: ...
@overload
def setting(name: Literal["Q_SERVES"]) -> list[str]: ...
def setting(name: str) -> object:
    block = cast(Mapping[str, object], settings.GATEHOUSE)
    return block[name]
