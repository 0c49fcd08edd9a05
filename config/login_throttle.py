"""Login throttling hooks for django-axes: whose failures count together, and the lockout page.

django-axes counts failed logins in the database (shared by every process) per account and
address together (settings.AXES_*); these functions tell it how to name the account and what
to answer while the pause lasts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

USERNAME_LENGTH = 150  # Django's username column: longer names are never an account


def throttled_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str:
    """The account a failure counts against: case and surrounding spaces do not make another
    one, so `Ana ` and `ana` share one count."""
    username = (credentials or {}).get("username") or request.POST.get("username") or ""
    return str(username).strip().lower()[:USERNAME_LENGTH]


def _lockout_ends(request: HttpRequest, username: str) -> datetime:
    """The pause ends a cool-off after the newest failure it counted (tries made during the
    pause are not counted, so this does not move)."""
    newest = AccessAttempt.objects.filter(
        username=username, ip_address=getattr(request, "axes_ip_address", None)
    ).aggregate(newest=Max("attempt_time"))["newest"]
    cool_off = get_cool_off(request) or settings.AXES_COOLOFF_TIME
    return (newest or timezone.now()) + cool_off


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any]
) -> HttpResponse:
    """429 with the login form and a message that says when to try again."""
    username = throttled_username(request, credentials)
    ends = _lockout_ends(request, username)
    seconds = max(0, int((ends - timezone.now()).total_seconds()))
    minutes = max(1, -(-seconds // 60))
    form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")})
    context = {
        "form": form,
        "next": request.POST.get("next", ""),
        "lockout": (
            "Too many failed attempts for this account from your address. Try again in "
            f"{minutes} minute{'s' if minutes != 1 else ''} (after {ends:%H:%M} UTC)."
        ),
    }
    response = render(request, "registration/login.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response
