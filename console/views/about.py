"""Pages that explain Gatehouse to the people using it: what each run state means."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import statechart


@require_GET
@login_required
def run_states(request: HttpRequest) -> HttpResponse:
    """The state machine drawn from the code, and a table of every state: any signed-in
    person may read it (it shows no run)."""
    context = {"diagram": statechart.svg(), "rows": statechart.state_rows()}
    return render(request, "about/states.html", context)
