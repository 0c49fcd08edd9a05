"""Team (automation) and CompanyIdentity (console) moved to accounts: a database migrated
before keeps its teams, their identities and every permission on them (manage_teams above
all), which are then accounts'."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.models import CompanyIdentity, Team

BEFORE = [
    ("automation", "0048_classifier_statuses_through_transitions"),
    ("console", "0001_company_identity"),
    ("accounts", None),
]
LINKED_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def migrate(targets: list[tuple[str, str | None]]) -> Any:
    """Migrate to `targets`; the models of that state."""
    MigrationExecutor(connection).migrate(targets)
    state = MigrationExecutor(connection).loader.project_state(
        [(app, name) for app, name in targets if name is not None]
    )
    return state.apps


def permission(apps: Any, app_label: str, model: str, codename: str) -> Any:
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label=app_label, model=model
    )
    found, _ = apps.get_model("auth", "Permission").objects.get_or_create(
        content_type=content_type, codename=codename, defaults={"name": codename}
    )
    return found


def held(group: str) -> set[tuple[str, str]]:
    rows = Group.objects.get(name=group).permissions
    return set(rows.values_list("content_type__app_label", "codename"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("accounts_row_made_meanwhile", [False, True])
def test_teams_identities_and_manage_teams_are_kept_when_they_move_to_accounts(
    accounts_row_made_meanwhile: bool,
) -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        old = migrate(BEFORE)
        contenttypes = old.get_model("contenttypes", "ContentType").objects
        # Before the move only automation's and console's rows exist (as on a deployment).
        contenttypes.filter(app_label="accounts").delete()
        manage = permission(old, "automation", "team", "manage_teams")
        view_identities = permission(old, "console", "companyidentity", "view_companyidentity")
        admins = old.get_model("auth", "Group").objects.create(name="people-admins")
        admins.permissions.add(manage, view_identities)
        old.get_model("automation", "Team").objects.create(
            group=admins, roles=["administrator"], description="Adds people", provider_groups=["IT"]
        )
        ines = old.get_model("auth", "User").objects.create(username="ines")
        ines.groups.add(admins)
        olaf = old.get_model("auth", "User").objects.create(username="olaf")
        olaf.user_permissions.add(manage)
        old.get_model("console", "CompanyIdentity").objects.create(
            user=ines, issuer="https://idp.test", subject="00u-ines", created_at=LINKED_AT
        )
        if accounts_row_made_meanwhile:
            # accounts' own row, made (by a `migrate` that stopped after accounts 0001)
            # before the old one moved, and held by another group.
            others = old.get_model("auth", "Group").objects.create(name="other-admins")
            others.permissions.add(permission(old, "accounts", "team", "manage_teams"))

        migrate(latest)
        ContentType.objects.clear_cache()

        team = Team.objects.get(group__name="people-admins")
        assert (team.roles, team.description, team.provider_groups) == (
            ["administrator"],
            "Adds people",
            ["IT"],
        )
        assert held("people-admins") == {
            ("accounts", "manage_teams"),
            ("accounts", "view_companyidentity"),
        }
        assert User.objects.get(username="ines").has_perm("accounts.manage_teams")
        assert User.objects.get(username="olaf").has_perm("accounts.manage_teams")
        assert not ContentType.objects.filter(app_label__in=["automation", "console"]).filter(
            model__in=["team", "companyidentity"]
        )
        assert Permission.objects.filter(codename="manage_teams").count() == 1
        if accounts_row_made_meanwhile:
            assert held("other-admins") == {("accounts", "manage_teams")}
        else:  # the very rows moved: same content type, same permission
            assert Permission.objects.get(codename="manage_teams").pk == manage.pk
        identity = CompanyIdentity.objects.select_related("user").get(subject="00u-ines")
        assert (identity.user.username, identity.issuer) == ("ines", "https://idp.test")

        old = migrate(BEFORE)

        back = old.get_model("auth", "Group").objects.get(name="people-admins").permissions
        assert ("automation", "manage_teams") in set(
            back.values_list("content_type__app_label", "codename")
        )
        assert old.get_model("automation", "Team").objects.get(group__name="people-admins")
    finally:
        migrate(latest)
        ContentType.objects.clear_cache()
