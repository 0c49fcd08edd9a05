"""The trained classifier models (automation.classifiers)."""

from __future__ import annotations

from django.contrib import admin

from automation.models import ClassifierModel
from core.admin_base import ReadOnlyAdminMixin


@admin.register(ClassifierModel)
class ClassifierModelAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Trained models of the learned classifier: what each was trained on and how it
    scored. `train_classifier` makes them; they never change."""

    list_display = ["version", "is_active", "trained_at", "training_size", "cv_accuracy"]
    list_filter = ["is_active"]
    ordering = ["-trained_at"]
    exclude = ["artifact"]
    readonly_fields = [
        "version",
        "checksum",
        "is_active",
        "trained_at",
        "training_size",
        "categories",
        "cv_accuracy",
        "held_out",
        "sources",
    ]
