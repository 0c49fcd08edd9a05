"""The audit trail in the admin: searchable, never editable."""

from __future__ import annotations

from django.contrib import admin

from audit.models import AuditEvent
from config.admin_base import ReadOnlyAdminMixin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "created_at",
        "action",
        "actor_label",
        "run",
        "approval",
        "from_state",
        "to_state",
    ]
    list_filter = ["action"]
    search_fields = ["=run__event_id", "actor_label"]
    list_select_related = ["run", "approval"]
    date_hierarchy = "created_at"
    show_full_result_count = False
