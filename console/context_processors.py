from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils import timezone

from approvals.selectors import inbox_count

# The navigation shows "99+" beyond this: every page pays for the count, and past a
# hundred waiting requests the exact number tells an approver nothing more.
NAV_COUNT_LIMIT = 100


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The inbox count in the navigation: one COUNT query that reads at most NAV_COUNT_LIMIT
    requests, only for people who have an inbox."""
    user = request.user
    # A signed-in person is a User; anyone else (AnonymousUser) has no inbox.
    if not isinstance(user, User) or not user.has_perm("approvals.view_approvalrequest"):
        return {}
    count = inbox_count(user, timezone.now(), limit=NAV_COUNT_LIMIT)
    if count >= NAV_COUNT_LIMIT:
        return {"nav_inbox_count": f"{NAV_COUNT_LIMIT - 1}+"}
    return {"nav_inbox_count": count}


def sign_in(request: HttpRequest) -> dict[str, Any]:
    """Whether the login page offers "Sign in with your company account" (OpenID Connect)."""
    return {"oidc_enabled": settings.OIDC_ENABLED}
