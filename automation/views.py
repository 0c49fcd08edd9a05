"""Console pages. The run pages live in the admin for now; the home page points there."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")
