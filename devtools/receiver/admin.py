from __future__ import annotations

from django.contrib import admin

from core.admin_base import ReadOnlyAdminMixin
from devtools.receiver.models import Delivery, Receipt


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["id", "effect", "idempotency_key", "performed_at"]
    search_fields = ["=idempotency_key"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["id", "idempotency_key", "status", "received_at"]
    list_filter = ["status"]
    search_fields = ["=idempotency_key"]
