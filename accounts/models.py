"""A team: a Django group with roles, a description, and the company sign-in's groups that
map to it; and which company account signs in as which local account.

Both tables keep the names of the apps they were made in (automation, console): the models
moved here, their rows did not."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class Team(models.Model):
    """A group of people with roles. Its group's permissions are always exactly the union of
    its roles' permissions (accounts.roles.team_permissions_apply, called by every service
    that changes `roles`); the catalogue's routes and approval rules name it by its group's
    name. `provider_groups` are the company sign-in's groups whose members are put in it
    (accounts.oidc)."""

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


class CompanyIdentity(models.Model):
    """A provider's identity (its issuer and the person's `sub`) and the one local account it
    signs in as. Made at the account's first company sign-in and never pointed elsewhere:
    the account is found by this pair, so a username the provider sends cannot take over an
    account it was not linked to."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="company_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "console_companyidentity"
        verbose_name_plural = "company identities"
        constraints = [
            # The sign-in's lookup: WHERE issuer = ... AND subject = ... (its index).
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="company_identity_one_account"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
