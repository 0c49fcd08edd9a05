"""Login with throttling: a few failed attempts per account and per address, then a pause.

The console's login page and the admin's count the same failures: either one is a way to
guess a password.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse

MAX_FAILURES = 5
WINDOW_SECONDS = 15 * 60
TOO_MANY = "Too many failed attempts. Wait 15 minutes and try again."


def _keys(request: HttpRequest) -> list[str]:
    username = (request.POST.get("username") or "").strip().lower()
    address = request.META.get("REMOTE_ADDR", "")
    return [f"login-failures:user:{username}", f"login-failures:addr:{address}"]


def _throttled(request: HttpRequest) -> bool:
    return any((cache.get(key) or 0) >= MAX_FAILURES for key in _keys(request))


def _count_failure(request: HttpRequest) -> None:
    for key in _keys(request):
        cache.add(key, 0, WINDOW_SECONDS)
        cache.incr(key)


class ThrottledLoginView(auth_views.LoginView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if _throttled(request):
            form = self.get_form()
            form.add_error(None, TOO_MANY)
            return self.render_to_response(self.get_context_data(form=form), status=429)
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200:  # the form came back: the credentials were wrong
            _count_failure(request)
        return response


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    """The admin's login form (staff only), under the same limit as the console's page."""

    def clean(self) -> dict[str, Any]:
        if self.request is None:  # the admin's login view always passes the request
            return super().clean()
        if _throttled(self.request):
            raise ValidationError(TOO_MANY, code="throttled")
        try:
            return super().clean()
        except ValidationError:
            _count_failure(self.request)
            raise
