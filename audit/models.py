"""The audit trail: one append-only table that every app writes to and nobody edits.

audit is the kernel app: every other app may import it, and it imports no code of theirs
but policy's signals (audit.receivers). Its one allowed dependency the other way is this
table's foreign keys to automation.Run, automation.IntakeRecord and
approvals.ApprovalRequest: named by string, so no module is imported, but the schema (and
the migrations) depend on those apps. A row is about a run or an approval, and the run page
and the reports join through these keys; a generic reference would lose the joins and the
PROTECT that keeps a run's history from being deleted under it. The import contract
(pyproject.toml, `make lint`) states the same.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """Append-only: every transition and every human action. PostgreSQL refuses edits to it."""

    run = models.ForeignKey(
        "automation.Run",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="audit_events",
    )
    intake = models.ForeignKey(
        "automation.IntakeRecord", null=True, blank=True, on_delete=models.PROTECT
    )
    approval = models.ForeignKey(
        "approvals.ApprovalRequest",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="audit_events",
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    actor_label = models.CharField(max_length=200, default="system")
    action = models.CharField(max_length=60)
    from_state = models.CharField(max_length=40, blank=True)
    to_state = models.CharField(max_length=40, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [
            # Reports and the run page: WHERE action = ... / WHERE run_id = ... ORDER BY created_at
            models.Index(fields=["action", "created_at"], name="audit_action_idx"),
            # Separation of duties: the runs a person acted on by hand (every action but a
            # decision on an approval, approvals.selectors.DECISION_ACTIONS). An approver's
            # own decisions can be most of their rows; this index holds only the rest.
            models.Index(
                fields=["actor", "run"],
                condition=models.Q(actor__isnull=False, run__isnull=False)
                & ~models.Q(action__startswith="approval."),
                name="audit_hand_action_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("audit events are append-only")
