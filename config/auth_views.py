"""Login with throttling: a few failed attempts per account and per address, then a pause."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

MAX_FAILURES = 5
WINDOW_SECONDS = 15 * 60


def _keys(request: HttpRequest) -> list[str]:
    username = (request.POST.get("username") or "").strip().lower()
    address = request.META.get("REMOTE_ADDR", "")
    return [f"login-failures:user:{username}", f"login-failures:addr:{address}"]


def _throttled(request: HttpRequest) -> bool:
    return any((cache.get(key) or 0) >= MAX_FAILURES for key in _keys(request))


class ThrottledLoginView(auth_views.LoginView):
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if _throttled(request):
            form = self.get_form()
            form.add_error(None, "Too many failed attempts. Wait 15 minutes and try again.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200:  # the form came back: the credentials were wrong
            for key in _keys(request):
                cache.add(key, 0, WINDOW_SECONDS)
                cache.incr(key)
        return response
