"""The console's start page: each role lands where its work is, the queues for whoever reads
runs, the inbox for an approver, the teams for an administrator; a person with none is told
they have no role."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render

from automation.roles import MANAGE_TEAMS
from console.views.staff import VIEW_RUNS
from core.http import AuthenticatedHttpRequest


@login_required
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    user = request.user
    if user.has_perm(VIEW_RUNS):
        return redirect("queues:list")
    if user.has_perm("approvals.view_approvalrequest"):
        return redirect("approvals:inbox")
    if user.has_perm(MANAGE_TEAMS):
        return redirect("teams:list")
    return render(request, "home/no_role.html", status=403)
