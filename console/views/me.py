"""The signed-in person's own settings (`me:*`, under /me/): how they hear of work."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from core.http import AuthenticatedHttpRequest
from notifications.models import Kind, Mode
from notifications.preferences import preferences_of, preferences_set


@require_http_methods(["GET", "POST"])
@login_required
def notification_settings(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method == "POST":
        chosen = {kind: request.POST.get(kind, "") for kind in Kind.values}
        problems = [kind for kind, mode in chosen.items() if mode not in Mode.values]
        if problems:
            messages.error(request, "Choose at once, in the daily digest, or never for each.")
        else:
            preferences_set(user=request.user, modes={k: Mode(m) for k, m in chosen.items()})
            messages.success(request, "Saved: you will hear of work as chosen.")
            return redirect("me:notifications")
    context = {
        "rows": [(kind, label, mode) for kind, label, mode in preferences_of(request.user)],
        "modes": Mode.choices,
        "email": request.user.email,
    }
    return render(request, "me/notifications.html", context)
