"""The console's start page: each role lands where its work is, the queues for whoever reads
runs, the inbox for an approver, the teams for an administrator, a team's tasks for a
member of a team with none of those roles; a person in no team is told they have no role. An
administrator of the install (who sets channels up: a superuser, an ops lead) lands on the
setup page while the install lacks something it cannot start without (console.setup)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render

from accounts.roles import MANAGE_TEAMS
from automation.intake.channels import CHANGE_CHANNEL
from console.setup import start_needs_setup
from console.views.staff import VIEW_RUNS
from core.http import AuthenticatedHttpRequest


@login_required
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    user = request.user
    if user.has_perm(CHANGE_CHANNEL) and start_needs_setup():
        return redirect("setup:checklist")
    if user.has_perm(VIEW_RUNS):
        return redirect("queues:list")
    if user.has_perm("approvals.view_approvalrequest"):
        return redirect("approvals:inbox")
    if user.has_perm(MANAGE_TEAMS):
        return redirect("teams:list")
    if user.groups.exists():  # a team with no role: its tasks and queue are its work
        return redirect("tasks:list")
    return render(request, "home/no_role.html", status=403)
