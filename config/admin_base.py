"""Admin building blocks shared by the apps: machine-made rows are read-only."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

# Approval records are shown in the admin only to those who read every group's requests (ops
# leads, auditors, recovery staff). An approver reads the requests routed to their groups in
# the console, which decides visibility request by request; the admin has no such filter.
VIEW_ALL_APPROVALS = "approvals.view_all_approvalrequests"


def sees_all_approvals(request: HttpRequest) -> bool:
    return request.user.is_active and request.user.has_perm(VIEW_ALL_APPROVALS)


M = TypeVar("M", bound=Model)


def without_approval_rows(request: HttpRequest, rows: QuerySet[M]) -> QuerySet[M]:
    """Audit rows about approvals (decisions, comments, escalations) only for those who may
    read every group's requests: someone else reading the trail sees the runs' own rows."""
    if sees_all_approvals(request):
        return rows
    return rows.filter(approval__isnull=True).exclude(action__startswith="approval.")


class ReadOnlyAdminMixin:
    """No add, no edit, no delete: the row is a record, not a form."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Every shown field is read-only, including machine-set ones such as created_at.
        return [f for f in (self.fields or []) if isinstance(f, str)]
