"""The scheduled jobs: every minute, find what people should hear of and send it; every
morning, the digests."""

from __future__ import annotations

from django.utils import timezone

from notifications.services import notifications_digest, notifications_find, notifications_send


def notify() -> dict[str, int]:
    now = timezone.now()
    found = notifications_find(now=now)
    return {"found": found, **notifications_send(now=now)}


def digest() -> int:
    return notifications_digest(now=timezone.now())
