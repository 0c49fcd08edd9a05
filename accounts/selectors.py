"""Reading teams and people for the console's pages and for the company sign-in."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Prefetch, Q, QuerySet

from accounts.models import Team
from accounts.roles import ADMINISTRATOR


def administrators() -> QuerySet[User]:
    """Everyone active who may manage teams and people: superusers, and the members of a
    team with the administrator role."""
    in_team = User.objects.filter(groups__team__roles__contains=[ADMINISTRATOR])
    return User.objects.filter(
        Q(is_superuser=True) | Q(pk__in=in_team.values("pk")), is_active=True
    )


def teams() -> QuerySet[Team]:
    """Every team by name, its members (active or not) prefetched by username."""
    members = Prefetch("group__user_set", queryset=User.objects.order_by("username"))
    return Team.objects.select_related("group").prefetch_related(members).order_by("group__name")


def team(name: str) -> Team:
    """The team of this name with its members; Team.DoesNotExist when there is none."""
    return teams().get(group__name=name)


def people() -> QuerySet[User]:
    """Everyone by username, with their teams."""
    return User.objects.prefetch_related("groups").order_by("username")


def teams_by_provider_group() -> dict[str, set[str]]:
    """Each company sign-in group a team maps, and the names of the teams it maps to."""
    found: dict[str, set[str]] = {}
    mapped = Team.objects.exclude(provider_groups=[]).select_related("group")
    for item in mapped:
        for provider_group in item.provider_groups:
            found.setdefault(provider_group, set()).add(item.group.name)
    return found
