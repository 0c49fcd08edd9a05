"""Policy versions: immutable documents with author, time, note and checksum."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from policy.schemas import PolicyDocument


class PolicyVersion(models.Model):
    """One saved policy document. Never edited: a change is a new version."""

    name = models.CharField(max_length=100, unique=True)
    document = models.JSONField()
    checksum = models.CharField(max_length=64)
    note = models.TextField(blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)
    is_active = models.BooleanField(default=False)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("activate_policyversion", "Can activate a policy version")]
        constraints = [
            # At most one active version, whatever two ops leads click at the same moment.
            models.UniqueConstraint(
                fields=["is_active"],
                condition=models.Q(is_active=True),
                name="policy_single_active_version",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The document is immutable once saved; only activation flags may change.
        if self.pk is not None:
            allowed = {"is_active", "activated_at"}
            fields = kwargs.get("update_fields")
            if fields is None or not set(fields) <= allowed:
                raise ValueError("a policy version is immutable: save a new version instead")
        super().save(*args, **kwargs)

    @property
    def parsed(self) -> PolicyDocument:
        # A version never changes once stored, so each process validates it once.
        key = (self.pk, self.name, self.checksum)
        document = _PARSED.get(key) if self.pk is not None else None
        if document is None:
            document = PolicyDocument.model_validate(self.document)
            if self.pk is not None:
                if len(_PARSED) >= 64:
                    _PARSED.clear()
                _PARSED[key] = document
        return document


# Validated documents by (pk, name, checksum): see PolicyVersion.parsed.
_PARSED: dict[tuple[Any, str, str], PolicyDocument] = {}


def parsed_version(pk: int, name: str, checksum: str) -> PolicyDocument:
    """The validated document of the version known by its identity (read elsewhere, in a
    query of the caller's): from this process's cache, else read and validated once."""
    document = _PARSED.get((pk, name, checksum))
    if document is None:
        document = PolicyVersion.objects.get(pk=pk).parsed
    return document


def parsed_if_read(pk: int, name: str, checksum: str) -> PolicyDocument | None:
    """The validated document of the version, if this process has read it already."""
    return _PARSED.get((pk, name, checksum))
