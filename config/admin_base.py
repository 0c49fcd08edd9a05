"""Admin building blocks shared by the apps: machine-made rows are read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


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
