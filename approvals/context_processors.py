from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from approvals.selectors import inbox_count


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The inbox count in the navigation: one COUNT query, only for people who have an inbox."""
    user = request.user
    if not user.is_authenticated or not user.has_perm("approvals.view_approvalrequest"):
        return {}
    return {"nav_inbox_count": inbox_count(user, timezone.now())}  # type: ignore[arg-type]
