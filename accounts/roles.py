"""Roles are defined here, in code: each a name, a sentence of what it may do, and the
permissions that let it. A team is any group of people given roles (accounts.models.Team): its
group holds exactly the union of its roles' permissions, and approval routing names teams by
their group's name.

`roles_ensure` (the `setup_roles` command) makes the sample teams with their roles when they
do not exist yet, and sets every team's permissions from its roles. Idempotent: safe to run
on every deploy; a team's roles chosen in the console are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import Q

from accounts.models import Team

APPS = ["automation", "approvals", "policy", "audit"]
# Reading teams (view_team) was one of automation's permissions before teams moved to
# accounts: it stays in, and no other of accounts' (nobody reads a company identity).
VIEW_ALL = Q(content_type__app_label__in=APPS, codename__startswith="view_") | Q(
    content_type__app_label="accounts", codename="view_team"
)

# Approvers read runs and the requests routed to their groups, and decide those.
# Not the runs at large: another team's run is none of their business.
APPROVER = (
    Q(content_type__app_label="approvals", codename__startswith="view_")
    & ~Q(codename="view_all_approvalrequests")
) | Q(codename="decide_approvalrequest")

OPS_LEAD = VIEW_ALL | Q(
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
)

MANAGE_TEAMS = "accounts.manage_teams"


@dataclass(frozen=True)
class Role:
    """A role as people read it (`name`, `may`) and the permissions it gives."""

    key: str
    name: str
    may: str
    permissions: Q


ADMINISTRATOR = "administrator"

ROLES: dict[str, Role] = {
    role.key: role
    for role in (
        Role(
            "approver",
            "Approver",
            "Decides the approval requests routed to the team (or escalated to it), and "
            "reads them with their evidence and their runs.",
            APPROVER,
        ),
        Role(
            "ops_lead",
            "Ops lead",
            "Reads every run; works and recovers the exception queues and corrects readings; "
            "changes intake channels, customers, API tokens and effects; writes and activates "
            "policy versions; decides escalated requests and gives requests to people; reads "
            "reports.",
            OPS_LEAD,
        ),
        Role(
            "recovery",
            "Recovery staff",
            "Reads every run; works the exception queues and recovers runs.",
            VIEW_ALL | Q(codename__in=["recover_run", "work_queue"]),
        ),
        Role(
            "auditor",
            "Auditor",
            "Reads every run, approval, policy version and report; changes nothing.",
            VIEW_ALL | Q(codename="view_reports"),
        ),
        Role(
            ADMINISTRATOR,
            "Administrator",
            "Makes teams and gives them roles, adds people to teams and takes them out, adds "
            "people and deactivates them (never their own team or account).",
            Q(content_type__app_label="accounts", codename="manage_teams"),
        ),
    )
}

# The sample teams `setup_roles` makes, with their roles: the groups the reference policy
# and the shipped examples name.
SAMPLE_TEAMS: dict[str, tuple[str, ...]] = {
    "security-approvers": ("approver",),
    "finance-approvers": ("approver",),
    "ops-leads": ("ops_lead",),
    "recovery-staff": ("recovery",),
    "auditors": ("auditor",),
    "administrators": (ADMINISTRATOR,),
}
SAMPLE_DESCRIPTIONS = {
    "security-approvers": "Decide the account reviews and security requests.",
    "finance-approvers": "Decide amounts over a limit and changes of bank details.",
    "ops-leads": "Work the exception queues, recover runs, change policy.",
    "recovery-staff": "Work the exception queues and recover runs.",
    "auditors": "Read runs, approvals, policy and reports; change nothing.",
    "administrators": "Make teams, give them roles and add people.",
}


def known_roles(keys: Iterable[str]) -> list[str]:
    """`keys` that name a role, in the order roles are defined (each once)."""
    wanted = set(keys)
    return [key for key in ROLES if key in wanted]


def permissions_of(keys: Iterable[str]) -> list[Permission]:
    """The union of the roles' permissions: what a team holding these roles may do."""
    roles = known_roles(keys)
    if not roles:
        return []
    query = Q(pk__in=[])
    for key in roles:
        query |= ROLES[key].permissions
    return list(Permission.objects.filter(query).distinct())


def team_permissions_apply(team: Team) -> int:
    """Give the team's group exactly its roles' permissions; how many that is."""
    permissions = permissions_of(team.roles)
    team.group.permissions.set(permissions)
    return len(permissions)


def roles_ensure() -> dict[str, int]:
    """Make every sample team that does not exist yet with its roles (a sample group made
    before teams existed becomes a team with them), and give every team exactly its roles'
    permissions. Returns the number of permissions of each team."""
    with transaction.atomic():
        for name, roles in SAMPLE_TEAMS.items():
            group, _ = Group.objects.get_or_create(name=name)
            Team.objects.get_or_create(
                group=group,
                defaults={"roles": list(roles), "description": SAMPLE_DESCRIPTIONS[name]},
            )
        return {
            team.group.name: team_permissions_apply(team)
            for team in Team.objects.select_related("group").order_by("group__name")
        }
