"""Approval requests and decisions: records, readable by operators, changed only by services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.models import ApprovalDecision, ApprovalRequest
from core.admin_base import ReadOnlyAdminMixin, ReadOnlyInline, sees_all_approvals


class DecisionInline(ReadOnlyInline):
    model = ApprovalDecision
    fields = ["created_at", "user", "approve", "counted", "refusal", "comment"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_all_approvals(request) and super().has_view_permission(request, obj)


class ApprovalRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only, and only for those who read every group's requests.

    Approvers hold the view permissions the console needs, but the admin cannot limit them to
    the requests routed to their groups: it shows them nothing, the console is their place.
    """

    def has_module_permission(self, request: HttpRequest) -> bool:
        return sees_all_approvals(request) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_all_approvals(request) and super().has_view_permission(request, obj)


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ApprovalRecordAdmin):
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
class ApprovalDecisionAdmin(ApprovalRecordAdmin):
    list_display = ["id", "request", "user", "approve", "counted", "refusal", "created_at"]
    list_filter = ["approve", "counted", "refusal"]
    search_fields = ["=request__run__event_id", "user__username"]
    list_select_related = ["request", "user"]
    date_hierarchy = "created_at"
