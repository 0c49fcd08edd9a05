"""Approval requests and decisions: records, readable by operators, changed only by services."""

from __future__ import annotations

from django.contrib import admin

from approvals.models import ApprovalDecision, ApprovalRequest
from config.admin_base import ReadOnlyAdminMixin, ReadOnlyInline


class DecisionInline(ReadOnlyInline):
    model = ApprovalDecision
    fields = ["created_at", "user", "approve", "counted", "refusal", "comment"]


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "id",
        "run",
        "effect",
        "group",
        "status",
        "required_approvals",
        "created_at",
        "expires_at",
    ]
    list_filter = ["status", "group", "effect"]
    search_fields = ["=run__event_id", "=fingerprint"]
    list_select_related = ["run"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    inlines = [DecisionInline]


@admin.register(ApprovalDecision)
class ApprovalDecisionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["id", "request", "user", "approve", "counted", "refusal", "created_at"]
    list_filter = ["approve", "counted", "refusal"]
    search_fields = ["=request__run__event_id", "user__username"]
    list_select_related = ["request", "user"]
    date_hierarchy = "created_at"
