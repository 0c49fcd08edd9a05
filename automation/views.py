"""Console entry point: send each person to where their work is."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render


@login_required
def home(request: HttpRequest) -> HttpResponse:
    user = request.user
    if user.has_perm("approvals.view_approvalrequest") and not user.is_superuser:
        return redirect("approvals:inbox")
    if user.is_staff:
        return redirect("admin:index")
    return render(request, "automation/no_role.html", status=403)
