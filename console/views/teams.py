"""The Teams and People pages (`teams:*`, under /teams/ and /people/): an administrator makes
teams, gives them roles and people, maps the company sign-in's groups to them, and adds,
changes and deactivates people. Every change is a service of accounts.services;
these views only read the form and show what the service said."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.models import User
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import selectors
from accounts.models import Team
from accounts.roles import MANAGE_TEAMS, ROLES, Role
from accounts.services import (
    FieldRefused,
    person_change,
    person_create,
    person_deactivate,
    team_change,
    team_create,
    team_member_add,
    team_member_remove,
    team_provider_groups_set,
)
from console.forms.teams import (
    MemberForm,
    PersonChangeForm,
    PersonForm,
    ProviderGroupsForm,
    TeamChangeForm,
    TeamForm,
)
from console.refusals import refusal_text, show_refusal
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.inputs import parse_number

manages = permission_required(MANAGE_TEAMS, raise_exception=True)


def _roles_of(team: Team) -> list[Role]:
    return [ROLES[key] for key in team.roles if key in ROLES]


def _refused(form: forms.Form, exc: ServiceError) -> None:
    """The service's refusal on the form: at its field when it names one the form has."""
    field = exc.field if isinstance(exc, FieldRefused) and exc.field in form.fields else None
    form.add_error(field, refusal_text(exc))


def _team_or_404(name: str) -> Team:
    try:
        return selectors.team(name)
    except Team.DoesNotExist as exc:
        raise Http404("no such team") from exc


def _person_or_404(user_id: int) -> User:
    person = None
    if parse_number(str(user_id)) is not None:
        person = User.objects.prefetch_related("groups").filter(pk=user_id).first()
    if person is None:
        raise Http404("no such person")
    return person


@require_GET
@login_required
@manages
def team_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    rows = [(team, _roles_of(team), list(team.group.user_set.all())) for team in selectors.teams()]
    return render(request, "teams/list.html", {"rows": rows, "roles": ROLES.values()})


@require_http_methods(["GET", "POST"])
@login_required
@manages
def team_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = TeamForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            team = team_create(
                name=data["name"],
                description=data["description"],
                roles=data["roles"],
                by=request.user,
            )
        except ServiceError as exc:
            _refused(form, exc)
        else:
            messages.success(request, f"Team {team.name} made. Add its people here.")
            return redirect("teams:team", name=team.name)
    return render(request, "teams/new.html", {"form": form, "roles": ROLES.values()})


@require_GET
@login_required
@manages
def team_page(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    return _team_page(request, _team_or_404(name))


def _team_page(
    request: AuthenticatedHttpRequest,
    team: Team,
    *,
    change: TeamChangeForm | None = None,
    member: MemberForm | None = None,
    groups: ProviderGroupsForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context: dict[str, Any] = {
        "team": team,
        "team_roles": _roles_of(team),
        "members": list(team.group.user_set.all()),
        "roles": ROLES.values(),
        "change": change
        or TeamChangeForm(initial={"roles": team.roles, "description": team.description}),
        "member": member or MemberForm(),
        "groups": groups
        or ProviderGroupsForm(initial={"provider_groups": "\n".join(team.provider_groups)}),
        "is_member": team.group.user_set.filter(pk=request.user.pk).exists(),
    }
    return render(request, "teams/team.html", context, status=status)


@require_POST
@login_required
@manages
def team_roles(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    team = _team_or_404(name)
    form = TeamChangeForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            team_change(
                name=team.name,
                roles=data["roles"],
                description=data["description"],
                by=request.user,
            )
        except ServiceError as exc:
            _refused(form, exc)
        else:
            messages.success(request, f"Saved: {team.name}'s roles and description.")
            return redirect("teams:team", name=team.name)
    return _team_page(request, team, change=form, status=400)


@require_POST
@login_required
@manages
def team_member(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Add a person (by username), or take one out (`remove`: their id)."""
    team = _team_or_404(name)
    if "remove" in request.POST:
        return _remove_member(request, team, parse_number(request.POST.get("remove")))
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            person = team_member_add(
                name=team.name, username=form.cleaned_data["username"], by=request.user
            )
        except ServiceError as exc:
            _refused(form, exc)
        else:
            messages.success(request, f"{person.get_username()} is now in {team.name}.")
            return redirect("teams:team", name=team.name)
    return _team_page(request, team, member=form, status=400)


def _remove_member(
    request: AuthenticatedHttpRequest, team: Team, user_id: int | None
) -> HttpResponse:
    person = _person_or_404(user_id or 0)
    try:
        team_member_remove(name=team.name, user_id=person.pk, by=request.user)
    except ServiceError as exc:
        show_refusal(request, exc)
    else:
        messages.success(request, f"{person.get_username()} is no longer in {team.name}.")
    return redirect("teams:team", name=team.name)


@require_POST
@login_required
@manages
def team_provider_groups(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    team = _team_or_404(name)
    form = ProviderGroupsForm(request.POST)
    if form.is_valid():
        try:
            team_provider_groups_set(name=team.name, provider_groups=form.names(), by=request.user)
        except ServiceError as exc:
            _refused(form, exc)
        else:
            messages.success(request, f"Saved: the sign-in groups of {team.name}.")
            return redirect("teams:team", name=team.name)
    return _team_page(request, team, groups=form, status=400)


@require_GET
@login_required
@manages
def people(request: AuthenticatedHttpRequest) -> HttpResponse:
    return render(request, "teams/people.html", {"people": selectors.people()[:500]})


@require_http_methods(["GET", "POST"])
@login_required
@manages
def person_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = PersonForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            person = person_create(
                username=data["username"],
                first_name=data["first_name"],
                last_name=data["last_name"],
                email=data["email"],
                password=data["password"] or None,
                by=request.user,
            )
        except ServiceError as exc:
            _refused(form, exc)
        else:
            messages.success(request, f"{person.get_username()} added. Put them in a team.")
            return redirect("teams:person", user_id=person.pk)
    return render(request, "teams/person_new.html", {"form": form})


@require_http_methods(["GET", "POST"])
@login_required
@manages
def person_page(request: AuthenticatedHttpRequest, user_id: int) -> HttpResponse:
    person = _person_or_404(user_id)
    initial = {"first_name": person.first_name, "last_name": person.last_name}
    sent = request.POST if request.method == "POST" else None
    form = PersonChangeForm(sent, initial={**initial, "email": person.email})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            person_change(
                user_id=person.pk,
                first_name=data["first_name"],
                last_name=data["last_name"],
                email=data["email"],
                by=request.user,
            )
        except ServiceError as exc:
            _refused(form, exc)
        else:
            messages.success(request, f"Saved: {person.get_username()}'s name and address.")
            return redirect("teams:person", user_id=person.pk)
    teams = [group.name for group in person.groups.all()]
    context = {"person": person, "form": form, "teams": sorted(teams)}
    return render(request, "teams/person.html", context, status=400 if form.errors else 200)


@require_POST
@login_required
@manages
def person_deactivate_view(request: AuthenticatedHttpRequest, user_id: int) -> HttpResponse:
    person = _person_or_404(user_id)
    try:
        person_deactivate(user_id=person.pk, by=request.user)
    except ServiceError as exc:
        show_refusal(request, exc)
    else:
        messages.success(request, f"{person.get_username()} can no longer sign in.")
    return redirect("teams:person", user_id=person.pk)
