"""Roles as Django groups with permissions. Idempotent: safe to run on every deploy."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db.models import Q

APPS = ["automation", "approvals", "policy"]
VIEW_ALL = Q(content_type__app_label__in=APPS, codename__startswith="view_")

ROLES: dict[str, Q] = {
    # Approvers read runs and approvals; they decide through the approval services.
    "security-approvers": Q(
        content_type__app_label__in=["automation", "approvals"], codename__startswith="view_"
    ),
    "finance-approvers": Q(
        content_type__app_label__in=["automation", "approvals"], codename__startswith="view_"
    ),
    "ops-leads": VIEW_ALL | Q(codename__in=["change_intakechannel", "change_apitoken"]),
    "recovery-staff": VIEW_ALL,
    "auditors": VIEW_ALL,
}


def roles_ensure() -> dict[str, int]:
    """Create every role group and give it exactly its permissions."""
    counts = {}
    for name, permissions in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = list(Permission.objects.filter(permissions))
        group.permissions.set(perms)
        counts[name] = len(perms)
    return counts
