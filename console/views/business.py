"""The business page: a version's request types, routes, effects, customer attributes and risk
signals, and the rules that name them, edited in a form and saved as a new draft
(console/forms/business.py). A business starts from a stored version, from a shipped starter
or from nothing (the start page); saving never activates anything."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from console.forms.business import (
    ADDABLE,
    CUES_HELP,
    FIELDS_HELP,
    MAX_SHOWN,
    BusinessForm,
    Start,
    add_prefix,
    shown_counts,
    typed_initial,
)
from console.views.policy import NAME_TAKEN, next_name, refused_at
from core.http import AuthenticatedHttpRequest
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import PolicyError, PolicyNameTaken, policy_version_create
from policy.starters import NOTHING, NOTHING_NAME, STARTERS, nothing_document, starter_get

ADD = "policy.add_policyversion"


@require_GET
@login_required
@permission_required(ADD, raise_exception=True)
def business_start(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The ways to start a business: from nothing or from a shipped starter."""
    return _starting(request)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(ADD, raise_exception=True)
def business_edit(request: AuthenticatedHttpRequest) -> HttpResponse:
    """GET: the form on its start (`?start=`, `?from=`, else the active version; with no
    version at all, the ways to start). POST: the new draft, the form again with every
    problem at its field, or (an "Add another" button) the form again with one more block."""
    start = _start(request)
    if start is None:
        return _starting(request)
    shown = shown_counts(request.POST)
    adding = request.POST.get("add", "")
    if adding in ADDABLE:
        return _with_another(request, start, shown, adding)
    data = request.POST if request.method == "POST" else None
    form = BusinessForm(data, base=start, shown=shown, initial={"version": _proposed(start)})
    if form.is_bound and form.is_valid():
        document = form.document()
        saved = _save(request, form, document) if document is not None else None
        if saved is not None:
            return saved
    return _page(request, form, status=400 if form.is_bound else 200)


def _starting(request: AuthenticatedHttpRequest) -> HttpResponse:
    context = {
        "starters": STARTERS,
        "nothing": NOTHING,
        "active": PolicyVersion.objects.filter(is_active=True).first(),
    }
    return render(request, "policy/business_start.html", context)


def _start(request: AuthenticatedHttpRequest) -> Start | None:
    """What the form starts from: a starter or nothing (`start`), a stored version (`base`,
    `from`), else the active version; None when there is none."""
    params: QueryDict = request.POST if request.method == "POST" else request.GET
    key = params.get("start", "")
    if key == NOTHING:
        return Start(nothing_document(), starter=NOTHING)
    if key:
        starter = starter_get(key)
        if starter is None:
            raise Http404("No such starter.")
        return Start(starter.document, starter=key)
    source = params.get("base") or request.GET.get("from")
    base = (
        get_object_or_404(PolicyVersion, name=source)
        if source
        else PolicyVersion.objects.filter(is_active=True).first()
    )
    return None if base is None else Start(base.parsed, version=base)


def _proposed(start: Start) -> str:
    """The name proposed for the new version: the next after a stored one; a starter's own
    name (or NOTHING_NAME) while no version has it."""
    if start.version is not None:
        return next_name(start.version.name)
    name = start.document.version if start.starter != NOTHING else NOTHING_NAME
    return next_name(name) if PolicyVersion.objects.filter(name=name).exists() else name


def _with_another(
    request: AuthenticatedHttpRequest, start: Start, shown: dict[str, int], kind: str
) -> HttpResponse:
    """The form again with one more block that adds a `kind`, everything typed kept; nothing
    is checked or saved."""
    typed = BusinessForm(request.POST, base=start, shown=shown)
    more = shown | {kind: min(shown[kind] + 1, MAX_SHOWN)}
    form = BusinessForm(base=start, shown=more, initial=typed_initial(typed))
    name = form.fields.get(f"{add_prefix(kind, more[kind])}-name")
    if name is not None:  # the new block's first input, where the person goes on typing
        name.widget.attrs["autofocus"] = True
    return _page(request, form, status=200, added=kind)


def _page(
    request: AuthenticatedHttpRequest, form: BusinessForm, *, status: int, added: str = ""
) -> HttpResponse:
    context = {
        "form": form,
        "start": form.start,
        "base": form.start.version,
        "starter": starter_get(form.start.starter),
        "from_nothing": form.start.starter == NOTHING,
        "fields_help": FIELDS_HELP,
        "cues_help": CUES_HELP,
        "added": added,
    }
    return render(request, "policy/business.html", context, status=status)


def _save(
    request: AuthenticatedHttpRequest, form: BusinessForm, document: PolicyDocument
) -> HttpResponse | None:
    try:
        version, created = policy_version_create(document=document, author=request.user)
    except PolicyNameTaken:
        form.add_problem(("version",), NAME_TAKEN)
        return None
    except PolicyError as exc:  # what storing it found: a group that does not exist
        form.add_problem(refused_at(exc), exc.problem)
        return None
    if not created:  # the same document under a name already taken: nothing new was saved
        form.add_problem(("version",), NAME_TAKEN)
        return None
    messages.success(request, f"Saved {version.name} as a draft.")
    return redirect("policy:detail", name=version.name)
