"""Typed access to the GATEHOUSE settings block."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def setting(name: str) -> Any:
    return settings.GATEHOUSE[name]
