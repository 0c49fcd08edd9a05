"""The outbox: effects, their delivery attempts, the controls that pause them, and the records
local effects write."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from automation.runs.models import Run
from automation.schemas import SUBJECT_LIMIT
from core.history import AppendOnly


class EffectStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    RETRY_WAIT = "retry_wait"
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"


# Waiting for a delivery: the sweep and the workers send these.
WAITING = [EffectStatus.PENDING, EffectStatus.RETRY_WAIT]
# Not delivered and no longer waiting, or waiting with no next attempt: a person may send it
# again (retry, a replay that reaches its key) or say it was done by hand.
UNDELIVERED = [
    EffectStatus.PENDING,
    EffectStatus.RETRY_WAIT,
    EffectStatus.REJECTED,
    EffectStatus.UNCERTAIN,
]


class Effect(ConcurrentTransitionMixin, models.Model):
    """The outbox. One row per (request, effect): the unique key makes a second one impossible.

    Its status changes only through the transitions below; the services lock the row, call
    one, and save.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="effects")
    name = models.CharField(max_length=50)
    idempotency_key = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    # What authorised it: the policy version and, where required, the approval request.
    authorization = models.JSONField()
    status = FSMField(
        max_length=20, choices=EffectStatus.choices, default=EffectStatus.PENDING, protected=True
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    response_ref = models.CharField(max_length=200, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, help_text="the start of the last response")
    # Delivery budget: attempts up to attempt_limit, and none after deadline_at. Staff retrying
    # a held effect grant a fresh budget; the idempotency key never changes.
    attempt_limit = models.PositiveSmallIntegerField(default=5)
    deadline_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When a delivery message was sent and not yet taken (see Run.dispatched_at).
    dispatched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The sweep: WHERE status IN (pending, retry_wait) AND next_attempt_at <= now. It
            # carries the name and attempts too, so the outbox figures of the queues page and
            # /metrics (by name, waiting or held) are an index-only scan.
            models.Index(
                fields=["status", "next_attempt_at"],
                include=["name", "attempts"],
                name="effect_due_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} for run {self.run_id} ({self.status})"

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=status, source=WAITING, target=EffectStatus.RETRY_WAIT)
    def wait(self, *, next_attempt_at: Any, last_error: str | None = None) -> None:
        """Not delivered this time: wait for the next attempt (None: for a person)."""
        self.next_attempt_at = next_attempt_at
        if last_error is not None:
            self.last_error = last_error

    @transition(field=status, source=WAITING, target=EffectStatus.DELIVERED)
    def deliver(self, *, reference: str, now: Any) -> None:
        self.response_ref = reference
        self.delivered_at = now
        self.lease_expires_at = None
        self.next_attempt_at = None

    @transition(field=status, source=WAITING, target=EffectStatus.REJECTED)
    def reject(self) -> None:
        """The receiver refused it for good."""
        self.next_attempt_at = None

    @transition(field=status, source=WAITING, target=EffectStatus.UNCERTAIN)
    def lose_track(self) -> None:
        """Sent with no answer: it may have been performed."""
        self.next_attempt_at = None

    @transition(field=status, source=UNDELIVERED, target=EffectStatus.RETRY_WAIT)
    def send_again(self, *, attempts: int, deadline_at: Any, now: Any) -> None:
        """A person (or a replay) sends it again: same key, a fresh budget, due now."""
        self.attempt_limit = self.attempts + attempts
        self.deadline_at = deadline_at
        self.next_attempt_at = now
        self.lease_expires_at = None

    @transition(field=status, source=UNDELIVERED, target=EffectStatus.DELIVERED)
    def deliver_by_hand(self, *, reference: str, now: Any) -> None:
        """A person did what the effect does, outside Gatehouse."""
        self.response_ref = reference
        self.delivered_at = now


class DeliveryResult(models.TextChoices):
    """What one delivery attempt came to (EffectAttempt.outcome, an adapter's Delivery)."""

    DELIVERED = "delivered"
    RETRY = "retry"  # not delivered, worth another attempt (5xx, timeout, refused connection)
    REJECTED = "rejected"  # refused for good (4xx, a record that cannot be written)
    UNCERTAIN = "uncertain"  # sent, no answer: it may have been performed
    LOST = "lost"  # the worker died before it recorded the attempt
    # Refused before anything was sent: a secret, an address or a header value the settings
    # do not allow (core.egress). Definite: a person changes the settings or the catalogue.
    NOT_SENT = "not_sent"


class EffectAttempt(models.Model):
    """One try at delivering an effect: when, how long, and what came back."""

    effect = models.ForeignKey(Effect, on_delete=models.PROTECT, related_name="attempt_rows")
    attempt = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    outcome = models.CharField(max_length=20)  # a DeliveryResult
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error_class = models.CharField(max_length=200, blank=True)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["effect", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["effect", "attempt"], name="effect_attempt_unique")
        ]
        indexes = [
            # Rate limit after a resume: WHERE effect name = ... AND started_at >= now - 1 min.
            models.Index(fields=["started_at"], name="effect_attempt_started_idx")
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of effect {self.effect_id}: {self.outcome}"


class EffectControl(models.Model):
    """Operator switches for one effect: paused during an outage, and a delivery rate."""

    name = models.CharField(max_length=50, unique=True)
    paused = models.BooleanField(default=False)
    # Deliveries per minute once resumed, so a recovering service is not flooded; null: no cap.
    rate_per_minute = models.PositiveIntegerField(null=True, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.paused else 'running'})"


class Task(models.Model):
    """A task row a `record` effect keeps in Gatehouse, for the group that owns the work.

    Keyed by the effect's key, so a repeat delivery changes nothing. `effect` is the
    catalogue's name for it; `payload` is the effect's whole payload, its parameters included.
    """

    idempotency_key = models.CharField(max_length=64, unique=True)
    run = models.ForeignKey(Run, on_delete=models.PROTECT)
    effect = models.CharField(max_length=50)
    group = models.CharField(max_length=150, blank=True)
    route = models.CharField(max_length=50, blank=True)
    subject = models.CharField(max_length=SUBJECT_LIMIT, blank=True)  # held whole
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Who works on it: taken by one member of the group (claimed), then done, with a note.
    # Written only by automation.effects.task_work, under the row's lock.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # task_claimed_idx
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    done_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    done_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["effect", "created_at"], name="task_effect_created_idx"),
            # A team's list: WHERE group IN (...) [AND done_at IS NULL] ORDER BY created_at, id.
            models.Index(fields=["group", "created_at"], name="task_group_created_idx"),
            # The open tasks at large (those who read every run): WHERE done_at IS NULL
            # ORDER BY created_at, id.
            models.Index(
                fields=["created_at"],
                condition=models.Q(done_at__isnull=True),
                name="task_open_created_idx",
            ),
            # The tasks a person holds: WHERE claimed_by_id = ... AND done_at IS NULL.
            models.Index(
                fields=["claimed_by", "created_at"],
                condition=models.Q(claimed_by__isnull=False, done_at__isnull=True),
                name="task_claimed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.effect} for {self.group or self.route or 'nobody'}: {self.subject}"

    @property
    def is_done(self) -> bool:
        return self.done_at is not None


class TaskComment(AppendOnly):
    """What a person wrote on a task's thread, as written, never edited: like a run's comment
    (automation.runs.models.RunComment), with the people and groups it mentions."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    body = models.TextField()
    mentions = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [
            # The task's thread, oldest first: WHERE task_id = ... ORDER BY created_at
            models.Index(fields=["task", "created_at"], name="task_comment_thread_idx"),
            # Who to tell: WHERE created_at >= ... among the comments that mention someone.
            models.Index(
                fields=["created_at"],
                condition=~models.Q(mentions={"users": [], "groups": []}),
                name="task_comment_mentions_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"comment by {self.author} on task {self.task_id}"
