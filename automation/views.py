"""Console entry point: send each person to where their work is."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect


@login_required
def home(request: HttpRequest) -> HttpResponse:
    if request.user.has_perm("approvals.view_approvalrequest") and not request.user.is_superuser:
        return redirect("approvals:inbox")
    if request.user.is_staff:
        return redirect("admin:index")
    return redirect("approvals:inbox")
