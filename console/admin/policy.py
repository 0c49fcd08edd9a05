"""Policy versions in the admin: readable, never edited (a change is a new version)."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from core.admin_base import ReadOnlyAdminMixin
from policy.models import PolicyVersion

VERSION_FIELDS = (
    "name",
    "is_active",
    "activated_at",
    "author",
    "created_at",
    "note",
    "parent",
    "checksum",
    "document_pretty",
)


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "is_active", "activated_at", "author", "created_at", "short_checksum"]
    list_filter = ["is_active"]
    search_fields = ["name"]
    fields = VERSION_FIELDS
    readonly_fields = VERSION_FIELDS

    @admin.display(description="checksum")
    def short_checksum(self, version: PolicyVersion) -> str:
        return version.checksum[:12]

    @admin.display(description="document")
    def document_pretty(self, version: PolicyVersion) -> str:
        return format_html("<pre>{}</pre>", json.dumps(version.document, indent=2))
