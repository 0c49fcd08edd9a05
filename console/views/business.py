"""The business page: a version's request types, routes and effects, and the rules that name
them, edited in a form and saved as a new draft (console/forms/business.py)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from console.forms.business import CUES_HELP, FIELDS_HELP, BusinessForm
from console.views.policy import NAME_TAKEN, next_name, refused_at
from core.http import AuthenticatedHttpRequest
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import PolicyError, PolicyNameTaken, policy_version_create


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("policy.add_policyversion", raise_exception=True)
def business_edit(request: AuthenticatedHttpRequest) -> HttpResponse:
    """GET: the form on the base version (the active one, or `?from=`). POST: the new draft,
    or the form again with every problem at its field."""
    source = request.POST.get("base") or request.GET.get("from")
    base: PolicyVersion | None = (
        get_object_or_404(PolicyVersion, name=source)
        if source
        else PolicyVersion.objects.filter(is_active=True).first()
    )
    if base is None:
        return render(request, "policy/business.html", {"form": None})
    data = request.POST if request.method == "POST" else None
    form = BusinessForm(data, base=base, initial={"version": next_name(base.name)})
    if form.is_bound and form.is_valid():
        document = form.document()
        saved = _save(request, form, document) if document is not None else None
        if saved is not None:
            return saved
    context = {"form": form, "base": base, "fields_help": FIELDS_HELP, "cues_help": CUES_HELP}
    status = 400 if form.is_bound else 200
    return render(request, "policy/business.html", context, status=status)


def _save(
    request: AuthenticatedHttpRequest, form: BusinessForm, document: PolicyDocument
) -> HttpResponse | None:
    try:
        version, _ = policy_version_create(document=document, author=request.user)
    except PolicyNameTaken:
        form.add_problem(("version",), NAME_TAKEN)
        return None
    except PolicyError as exc:  # what storing it found: a group that does not exist
        form.add_problem(refused_at(exc), exc.problem)
        return None
    messages.success(request, f"Saved {version.name} as a draft.")
    return redirect("policy:detail", name=version.name)
