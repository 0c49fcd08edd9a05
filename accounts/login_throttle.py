"""Login throttling hooks for django-axes: whose failures count together, which limit
applies, and the lockout page.

django-axes counts failed logins in the database (shared by every process) per account and
address together, and per address alone (settings.AXES_LOCKOUT_PARAMETERS); these functions
tell it how to name the account, the limit in force, and what to answer while the pause
lasts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

USERNAME_LENGTH = 150  # Django's username column: longer names are never an account


def throttled_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str:
    """The account a failure counts against: case and surrounding spaces do not make another
    one, so `Ana ` and `ana` share one count."""
    username = (credentials or {}).get("username") or request.POST.get("username") or ""
    return str(username).strip().lower()[:USERNAME_LENGTH]


def _cool_off(request: HttpRequest) -> timedelta:
    return get_cool_off(request) or settings.AXES_COOLOFF_TIME


def _attempts(request: HttpRequest, username: str | None) -> QuerySet[AccessAttempt]:
    """The failures counted from this request's address (for one account, or for any) within
    the cool-off, as django-axes counts them."""
    attempts = AccessAttempt.objects.filter(
        ip_address=getattr(request, "axes_ip_address", None),
        attempt_time__gte=timezone.now() - _cool_off(request),
    )
    return attempts if username is None else attempts.filter(username=username)


def _account_failures(request: HttpRequest, username: str) -> int:
    total = _attempts(request, username).aggregate(n=Sum("failures_since_start"))["n"]
    return int(total or 0)


def _account_paused(request: HttpRequest, username: str) -> bool:
    return _account_failures(request, username) >= settings.LOGIN_ACCOUNT_FAILURE_LIMIT


def failure_limit(request: HttpRequest, credentials: dict[str, Any] | None) -> int:
    """The limit django-axes holds the failures it counts against (AXES_FAILURE_LIMIT).

    It compares one number, the larger of its counts, with one limit; the larger is always
    the address's count (it includes the account's). So the account's limit is in force once
    the account has reached it (the address has too, then), and the higher address limit
    otherwise: a pause after 5 failures for one account, or after 10 for any accounts from
    one address."""
    if _account_paused(request, throttled_username(request, credentials)):
        return int(settings.LOGIN_ACCOUNT_FAILURE_LIMIT)
    return int(settings.LOGIN_ADDRESS_FAILURE_LIMIT)


def _lockout_ends(request: HttpRequest, username: str | None) -> datetime:
    """The pause ends a cool-off after the newest failure it counted (tries made during the
    pause are not counted, so this does not move)."""
    newest = _attempts(request, username).aggregate(newest=Max("attempt_time"))["newest"]
    return (newest or timezone.now()) + _cool_off(request)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any]
) -> HttpResponse:
    """429 with the login form and a message that says when to try again."""
    username = throttled_username(request, credentials)
    account = _account_paused(request, username)
    ends = _lockout_ends(request, username if account else None)
    seconds = max(0, int((ends - timezone.now()).total_seconds()))
    minutes = max(1, -(-seconds // 60))
    form = AuthenticationForm(request, initial={"username": request.POST.get("username", "")})
    whose = "for this account from your address" if account else "from your address"
    context = {
        "form": form,
        "next": request.POST.get("next", ""),
        "lockout": (
            f"Too many failed attempts {whose}. Try again in "
            f"{minutes} minute{'s' if minutes != 1 else ''} (after {ends:%H:%M} UTC)."
        ),
    }
    response = render(request, "registration/login.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response
