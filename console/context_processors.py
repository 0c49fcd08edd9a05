from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone

from approvals.selectors import inbox_count
from notifications.services import unread_count

# The navigation shows "99+" beyond this: past a hundred waiting requests the exact number
# tells an approver nothing more.
NAV_COUNT_LIMIT = 100
# How long a person's count is reused. Every page shows it, and counting costs more than the
# rest of a small page (the same filter as the inbox, separation of duties included). A
# request, decision, delegation or group change saved by this process starts every count
# afresh (`counts_changed`); one saved by another process (a worker opening a request, an
# expiry) shows within this many seconds, or at once with a cache shared by every process
# (GATEHOUSE_CACHE_URL). The inbox page itself always counts live.
NAV_COUNT_SECONDS = 30
GENERATION_KEY = "gatehouse:nav-count:generation"


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The inbox count in the navigation, only for people who have an inbox: at most
    NAV_COUNT_LIMIT requests counted, then reused for NAV_COUNT_SECONDS."""
    user = request.user
    # A signed-in person is a User; anyone else (AnonymousUser) has no inbox.
    if not isinstance(user, User) or not user.has_perm("approvals.view_approvalrequest"):
        return {}
    generation = cache.get_or_set(GENERATION_KEY, time.time_ns, None)
    key = f"gatehouse:nav-count:{generation}:{user.pk}"
    count = cache.get(key)
    if count is None:
        count = inbox_count(user, timezone.now(), limit=NAV_COUNT_LIMIT)
        cache.set(key, count, NAV_COUNT_SECONDS)
    if count >= NAV_COUNT_LIMIT:
        return {"nav_inbox_count": f"{NAV_COUNT_LIMIT - 1}+"}
    return {"nav_inbox_count": count}


UNREAD_KEY = "gatehouse:nav-unread:{user}"


def unread(request: HttpRequest) -> dict[str, Any]:
    """The person's unread notifications in the navigation, on every page: counted up to
    NAV_COUNT_LIMIT on one partial index, then reused for NAV_COUNT_SECONDS (a notification is
    written by a worker; marking some read here starts the count afresh, `unread_changed`)."""
    user = request.user
    if not isinstance(user, User):
        return {}
    key = UNREAD_KEY.format(user=user.pk)
    count = cache.get(key)
    if count is None:
        count = unread_count(user, limit=NAV_COUNT_LIMIT)
        cache.set(key, count, NAV_COUNT_SECONDS)
    if count >= NAV_COUNT_LIMIT:
        return {"nav_unread_count": f"{NAV_COUNT_LIMIT - 1}+"}
    return {"nav_unread_count": count}


def unread_changed(user_id: int) -> None:
    """The person's unread count is stale: they marked notifications read."""
    cache.delete(UNREAD_KEY.format(user=user_id))


def counts_changed(**_: Any) -> None:
    """Every cached navigation count is stale: something it counts was saved (receivers in
    console.apps)."""
    cache.set(GENERATION_KEY, time.time_ns(), None)


def sign_in(request: HttpRequest) -> dict[str, Any]:
    """Whether the login page offers "Sign in with your company account" (OpenID Connect)."""
    return {"oidc_enabled": settings.OIDC_ENABLED}
