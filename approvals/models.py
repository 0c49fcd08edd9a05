"""Approval requests bind one proposed operation; decisions are append-only rows."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from approvals.binding import Binding
from core.history import AppendOnly


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    STALE = "stale"
    EXPIRED = "expired"
    # Closed by an approver who asks for the reading to be corrected: neither approved nor
    # rejected, and no decision of either (the reports count only those).
    SENT_BACK = "sent_back"


# Closed requests a run's change of reading or policy makes stale: one still waiting, and one
# approved but not yet used.
INVALIDATED = [ApprovalStatus.PENDING, ApprovalStatus.APPROVED]


class ApprovalRequest(ConcurrentTransitionMixin, models.Model):
    """One proposed effect of one run, bound to the input and versions it was proposed under.

    Its status changes only through the transitions below (the services lock, call, save).
    """

    run = models.ForeignKey("automation.Run", on_delete=models.PROTECT, related_name="approvals")
    effect = models.CharField(max_length=50)
    effect_payload = models.JSONField(default=dict)
    fingerprint = models.CharField(max_length=64)
    workflow_version = models.CharField(max_length=100)
    policy_version = models.CharField(max_length=100)
    evidence = models.JSONField(default=dict)
    group = models.CharField(max_length=100)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    status = FSMField(
        max_length=20,
        choices=ApprovalStatus.choices,
        default=ApprovalStatus.PENDING,
        protected=True,
    )
    status_reason = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField()
    escalate_at = models.DateTimeField()
    escalate_to = models.CharField(max_length=100, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    # Who works on it: claimed by an approver, or given to one by a lead. Anyone eligible may
    # still decide; the page says who has it, so two people do not both take it up.
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    # Set once the run has executed on this approval: an approval is used at most once.
    consumed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        permissions = [
            ("decide_approvalrequest", "Can decide approval requests routed to their groups"),
            ("view_all_approvalrequests", "Can see approval requests of every group"),
            ("assign_approvalrequest", "Can give a request to a member of its group"),
        ]
        constraints = [
            # One open request per run and effect: a fresh one replaces a stale one, never joins it.
            models.UniqueConstraint(
                fields=["run", "effect"],
                condition=models.Q(status=ApprovalStatus.PENDING),
                name="approval_one_pending_per_run_effect",
            )
        ]
        indexes = [
            # The inbox: WHERE status = pending AND group IN (...) ORDER BY created_at
            models.Index(fields=["status", "group", "created_at"], name="approval_inbox_idx"),
            # The inbox's pages and count: WHERE status = pending ... ORDER BY created_at, id
            # LIMIT n, walked in order (the page joins its runs for the rows it shows only).
            models.Index(
                fields=["created_at", "id"],
                condition=models.Q(status=ApprovalStatus.PENDING),
                name="approval_pending_idx",
            ),
            # Approval waits on the reports: WHERE decided_at >= ... AND decided_at < ...
            models.Index(fields=["decided_at"], name="approval_decided_idx"),
            # My work: WHERE status = pending AND assignee_id = ... ORDER BY created_at, id.
            models.Index(
                fields=["assignee", "created_at", "id"],
                condition=models.Q(status=ApprovalStatus.PENDING, assignee__isnull=False),
                name="approval_assignee_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"approval #{self.pk} of {self.effect} for run {self.run_id}"

    @property
    def is_pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.APPROVED)
    def approve(self, *, now: Any) -> None:
        self._decided("approved", now)

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.REJECTED)
    def reject(self, *, now: Any) -> None:
        self._decided("rejected", now)

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.SENT_BACK)
    def send_back(self, *, reason: str, now: Any) -> None:
        self._decided(reason, now)

    @transition(field=status, source=ApprovalStatus.PENDING, target=ApprovalStatus.EXPIRED)
    def expire(self, *, reason: str, now: Any) -> None:
        self._decided(reason, now)

    @transition(field=status, source=INVALIDATED, target=ApprovalStatus.STALE)
    def go_stale(self, *, reason: str, now: Any) -> None:
        """The run it was asked for changed (its reading, the policy): no longer binding."""
        self._decided(reason, now)

    @transition(field=status, source=INVALIDATED, target=ApprovalStatus.EXPIRED)
    def lapse(self, *, reason: str, now: Any) -> None:
        """Found past its expiry when the run came to use it."""
        self._decided(reason, now)

    def _decided(self, reason: str, now: Any) -> None:
        self.status_reason = reason
        self.decided_at = now

    def visible_groups(self) -> list[str]:
        """The request's own group, plus the one it escalated to."""
        return [g for g in (self.group, self.escalate_to if self.escalated_at else "") if g]

    def binding(self) -> Binding:
        return Binding(
            fingerprint=self.fingerprint,
            workflow_version=self.workflow_version,
            policy_version=self.policy_version,
            effect=self.effect,
        )


class ApprovalDecision(AppendOnly):
    """A person's decision, with the exact binding they saw. Never edited."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="decisions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    approve = models.BooleanField()
    comment = models.TextField(blank=True)
    seen_fingerprint = models.CharField(max_length=64)
    seen_workflow_version = models.CharField(max_length=100)
    seen_policy_version = models.CharField(max_length=100)
    seen_effect = models.CharField(max_length=50)
    # The person whose approvals `user` decided while they were away (a delegation); empty
    # when `user` decided in their own right. Either way one person counts once.
    on_behalf_of = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # False when the decision was refused (stale or expired binding): kept, but authorises nothing.
    counted = models.BooleanField(default=True)
    refusal = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [
            # Decided by me: WHERE user_id = ... ORDER BY created_at DESC, id DESC.
            models.Index(fields=["user", "created_at", "id"], name="approval_decision_user_idx"),
        ]
        constraints = [
            # One person counts once on one request, even if they click twice at once.
            models.UniqueConstraint(
                fields=["request", "user"],
                condition=models.Q(counted=True),
                name="decision_one_per_person",
            )
        ]

    def __str__(self) -> str:
        verdict = "approved" if self.approve else "rejected"
        return f"{self.user} {verdict} request #{self.request_id}"


class Delegation(models.Model):
    """While `delegator` is away (from `starts_at` to `ends_at`), `delegate` decides the
    requests routed to the delegator's groups, on their behalf. It ends by itself; ending it
    early keeps the row. Never edited otherwise: a new window is a new row."""

    delegator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="delegations_given"
    )
    delegate = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="delegations_received"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    ended_early_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-starts_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="delegation_window"
            ),
            models.CheckConstraint(
                condition=~models.Q(delegate=models.F("delegator")), name="delegation_to_another"
            ),
        ]
        indexes = [
            # Whose approvals may this person decide now: WHERE delegate_id = ... AND window.
            models.Index(fields=["delegate", "ends_at"], name="delegation_delegate_idx"),
            models.Index(fields=["delegator", "ends_at"], name="delegation_delegator_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.delegate} for {self.delegator} until {self.ends_at:%Y-%m-%d %H:%M}"
