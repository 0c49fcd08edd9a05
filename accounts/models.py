"""A team: a Django group with roles, a description, and the company sign-in's groups that
map to it. Its table keeps the name of the app it was made in (automation): the model moved
here, its rows did not."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models


class Team(models.Model):
    """A group of people with roles. Its group's permissions are always exactly the union of
    its roles' permissions (accounts.roles.team_permissions_apply, called by every service
    that changes `roles`); the catalogue's routes and approval rules name it by its group's
    name. `provider_groups` are the company sign-in's groups whose members are put in it
    (console.oidc)."""

    group = models.OneToOneField(
        Group, on_delete=models.CASCADE, primary_key=True, related_name="team"
    )
    description = models.TextField(blank=True)
    # Keys of accounts.roles.ROLES, in their order.
    roles = models.JSONField(default=list, blank=True)
    # Names of the identity provider's groups, as its groups claim sends them.
    provider_groups = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "automation_team"
        permissions = [("manage_teams", "Make teams, give them roles and add people")]

    def __str__(self) -> str:
        return self.group.name

    @property
    def name(self) -> str:
        return self.group.name
