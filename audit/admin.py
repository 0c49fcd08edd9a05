"""The audit trail in the admin: searchable, never editable."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.models import AuditEvent
from config.admin_base import ReadOnlyAdminMixin, without_approval_rows


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

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return without_approval_rows(request, super().get_queryset(request))
