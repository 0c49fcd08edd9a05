"""The console's own record: which company account (OpenID Connect) signs in as which local
account. Everything else the console shows belongs to the domain apps."""

from __future__ import annotations

from django.conf import settings
from django.db import models


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
        verbose_name_plural = "company identities"
        constraints = [
            # The sign-in's lookup: WHERE issuer = ... AND subject = ... (its index).
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="company_identity_one_account"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
