"""Policy pages for ops leads: versions, the editor with its diff, simulation, activation."""

from __future__ import annotations

import difflib
import re
from datetime import timedelta
from typing import Any

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automation.models import Simulation
from automation.services.simulation import SIMULATE, simulation_start
from config.http import AuthenticatedHttpRequest
from console.forms.ops import SimulationForm
from policy.models import PolicyVersion
from policy.schemas import VERSION_NAME_MAX_LENGTH, version_name_problem
from policy.services import (
    PolicyError,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from reports.selectors import policy_impacts

VIEW = "policy.view_policyversion"


def as_yaml(policy: PolicyVersion | None, **changes: str) -> str:
    """The document in the schema's order (the database keeps no key order)."""
    if policy is None:
        return ""
    data = {**policy.parsed.model_dump(mode="json"), **changes}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def next_name(name: str) -> str:
    """policy-1 -> policy-2 (or the next free one); always a usable name, even after one that
    was stored before names were checked."""
    match = re.match(r"^(.*?)(\d+)$", name)
    stem, number = (match.group(1), int(match.group(2))) if match else (f"{name}-", 1)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).lstrip("._-")[: VERSION_NAME_MAX_LENGTH - 12]
    stem = stem or "policy-"
    number = min(number, 10**10)  # a suggestion, not arithmetic on whatever digits were there
    taken = set(PolicyVersion.objects.values_list("name", flat=True))
    candidate = f"{stem}{number + 1}"
    while candidate in taken:
        number += 1
        candidate = f"{stem}{number + 1}"
    return candidate


def policy_url(name: str) -> str | None:
    """The console address of a version; None for a name stored before names were checked
    that no address can carry (`a/b`, `..`): such a version is listed, never linked."""
    if version_name_problem(name) is not None:
        return None
    return reverse("automation:policy", kwargs={"name": name})


def _active() -> PolicyVersion | None:
    return PolicyVersion.objects.filter(is_active=True).first()


@require_GET
@login_required
@permission_required(VIEW, raise_exception=True)
def policy_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    versions = PolicyVersion.objects.select_related("author", "parent")[:100]
    context = {
        "versions": [(version, policy_url(version.name)) for version in versions],
        "impacts": policy_impacts(now=timezone.now()),
    }
    return render(request, "policy/list.html", context)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("policy.add_policyversion", raise_exception=True)
def policy_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    active = _active()
    text = request.POST.get("document", "")
    error = ""
    if request.method == "POST":
        try:
            document = parse_policy_text(text)
            version, _ = policy_version_create(document=document, author=request.user)
        except PolicyError as exc:
            error = str(exc)
        else:
            messages.success(request, f"Saved {version.name} as a draft.")
            return redirect("automation:policy", name=version.name)
    else:
        text = as_yaml(active, version=next_name(active.name), note="") if active else ""
    context = {"text": text, "error": error, "active": active}
    return render(request, "policy/edit.html", context, status=400 if error else 200)


def _detail_context(version: PolicyVersion, simulation_form: SimulationForm) -> dict[str, Any]:
    active = _active()
    diff = list(
        difflib.unified_diff(
            as_yaml(active).splitlines(),
            as_yaml(version).splitlines(),
            fromfile=active.name if active else "(none)",
            tofile=version.name,
            lineterm="",
        )
    )
    now = timezone.now()
    return {
        "version": version,
        "active": active,
        "text": as_yaml(version),
        "diff": diff,
        "simulations": Simulation.objects.filter(policy_version=version.name).order_by(
            "-created_at"
        )[:5],
        "simulation_form": simulation_form,
        "since": now - timedelta(days=30),
        "until": now + timedelta(minutes=1),
    }


@require_GET
@login_required
@permission_required(VIEW, raise_exception=True)
def policy_detail(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    version = get_object_or_404(PolicyVersion.objects.select_related("author", "parent"), name=name)
    return render(request, "policy/detail.html", _detail_context(version, SimulationForm()))


@require_POST
@login_required
@permission_required(SIMULATE, raise_exception=True)
def policy_simulate(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    version = get_object_or_404(PolicyVersion.objects.select_related("author", "parent"), name=name)
    form = SimulationForm(request.POST)
    if not form.is_valid():  # the page again, the window's problems shown at the form
        context = _detail_context(version, form)
        return render(request, "policy/detail.html", context, status=400)
    since = form.cleaned_data["since"] or timezone.now() - timedelta(days=30)
    until = form.cleaned_data["until"] or timezone.now()
    simulation = simulation_start(version=version.name, since=since, until=until, user=request.user)
    return redirect("automation:simulation", simulation_id=simulation.pk)


@require_POST
@login_required
# Checked before the version is looked up (the service checks again): someone who may not
# activate learns nothing about which version names exist.
@permission_required("policy.activate_policyversion", raise_exception=True)
def policy_activate(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    get_object_or_404(PolicyVersion, name=name)
    policy_version_activate(name=name, user=request.user)
    messages.success(request, f"{name} is now the active policy. Runs decided from now on use it.")
    return redirect("automation:policy", name=name)


@require_GET
@login_required
@permission_required(VIEW, raise_exception=True)
def simulation(request: AuthenticatedHttpRequest, simulation_id: int) -> HttpResponse:
    item = get_object_or_404(Simulation, pk=simulation_id)
    moves: dict[str, int] = {}
    for change in item.changes:
        key = f"{change['old']} → {change['new']}"
        moves[key] = moves.get(key, 0) + 1
    context = {
        "simulation": item,
        "policy_url": policy_url(item.policy_version),
        "moves": sorted(moves.items()),
        "changes": item.changes[:200],
    }
    return render(request, "policy/simulation.html", context)
