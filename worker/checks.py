"""Refuse a worker configuration that would run a task twice at once or retry forever."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_q_cluster(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    conf = getattr(settings, "Q_CLUSTER", {})
    errors = []
    timeout, retry = conf.get("timeout"), conf.get("retry", 60)
    if not timeout or retry <= timeout:
        errors.append(
            Error(
                f"Q_CLUSTER retry ({retry}s) must be greater than timeout ({timeout}s)",
                hint="A task still running would be handed to a second worker.",
                id="gatehouse.E001",
            )
        )
    attempts = conf.get("max_attempts")
    # django-q2 gives up only when max_attempts > 0: zero, negative or missing means forever.
    if not isinstance(attempts, int) or attempts <= 0:
        errors.append(
            Error(
                "Q_CLUSTER max_attempts must be finite",
                hint="Our own attempt counters own retries; the broker must give up.",
                id="gatehouse.E002",
            )
        )
    if not conf.get("ack_failures"):
        errors.append(Error("Q_CLUSTER ack_failures must be on", id="gatehouse.E003"))
    return errors
