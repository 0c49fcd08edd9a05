"""Roles as Django groups with permissions. Idempotent: safe to run on every deploy."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.db.models import Q

APPS = ["automation", "approvals", "policy", "audit"]
VIEW_ALL = Q(content_type__app_label__in=APPS, codename__startswith="view_")

# Approvers read runs and the requests routed to their groups, and decide those.
# Not the runs at large: another team's run is none of their business.
APPROVER = (
    Q(content_type__app_label="approvals", codename__startswith="view_")
    & ~Q(codename="view_all_approvalrequests")
) | Q(codename="decide_approvalrequest")

ROLES: dict[str, Q] = {
    "security-approvers": APPROVER,
    "finance-approvers": APPROVER,
    "ops-leads": VIEW_ALL
    | Q(
        codename__in=[
            "change_intakechannel",
            "change_customer",  # the customer list: added, changed, loaded from a file
            "change_apitoken",
            "recover_run",
            "correct_run",
            "work_queue",
            "change_effectcontrol",
            "add_policyversion",
            "activate_policyversion",
            "decide_approvalrequest",  # for requests escalated to them
            "assign_approvalrequest",  # to a member of the request's group
            "view_reports",
        ]
    ),
    "recovery-staff": VIEW_ALL | Q(codename__in=["recover_run", "work_queue"]),
    "auditors": VIEW_ALL | Q(codename="view_reports"),
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
