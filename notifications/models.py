"""Telling people that work waits for them: one row per event and person, sent by a worker.

A notification is found, not pushed: the scheduled job (`notifications.tasks.notify`) looks
at the approvals and runs as they are and writes a row for each thing a person should hear of,
keyed by the event and the person, so the row is written once however many workers look at the
same moment (the key is unique; a second insert does nothing). The same job then sends the
rows that are due, each under a row lock, and retries a failed one with backoff. The rows are
the record: the run page says who was told of what, and when.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition


class Kind(models.TextChoices):
    WAITING = "waiting", "a request waits for your group"
    ASSIGNED = "assigned", "a lead gives a request to you"
    DELEGATED = "delegated", "someone lets you decide their approvals while away"
    SLA_NEAR = "sla_near", "a request's time to decide is nearly up"
    ESCALATED = "escalated", "a request was escalated to your group"
    EXPIRING = "expiring", "a request is about to expire"
    HELD = "held", "a run you work on is held"
    MENTIONED = "mentioned", "someone mentions you or your group in a comment"


class Mode(models.TextChoices):
    IMMEDIATE = "immediate", "at once"
    DIGEST = "digest", "in the daily digest"
    OFF = "off", "never"


class Status(models.TextChoices):
    PENDING = "pending"  # to be sent (again, after a failure, at next_attempt_at)
    SENT = "sent"
    DIGEST = "digest"  # waits for the person's daily digest
    DIGESTED = "digested"  # sent in a digest
    OFF = "off"  # the person turned this kind off: kept, never sent
    FAILED = "failed"  # every attempt failed


class Channel(models.TextChoices):
    EMAIL = "email", "e-mail"
    SLACK = "slack", "Slack"
    TEAMS = "teams", "Microsoft Teams"


class Notification(ConcurrentTransitionMixin, models.Model):
    """One thing one person (or a group's chat) is told of. Its status is set when it is
    written (by the person's preference) and changes only through the transitions below."""

    # "<kind>:<event>:<user id>", or "<kind>:<event>:group:<name>" for a group's chat: at most
    # one row per event and person (or group).
    key = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices, default=Channel.EMAIL)
    # The person told by e-mail; none for a message to a group's chat.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT)
    # The group the person was told as a member of ('' when told as the run's owner), or the
    # group whose chat was told.
    group = models.CharField(max_length=100, blank=True)
    # The run it is about (none for a delegation, which is about a person's requests).
    run = models.ForeignKey("automation.Run", null=True, on_delete=models.PROTECT, related_name="+")
    approval = models.ForeignKey(
        "approvals.ApprovalRequest", null=True, on_delete=models.PROTECT, related_name="+"
    )
    subject = models.CharField(max_length=300)
    body = models.TextField()
    status = FSMField(max_length=10, choices=Status.choices, default=Status.PENDING, protected=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # The task it is about (a mention on a task's thread).
    task = models.ForeignKey(
        "automation.Task", null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    # When the person marked it read in the console (none: unread). Sending does not read it.
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [
            # The sender: WHERE status = pending ORDER BY next_attempt_at (few rows at a time).
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status="pending"),
                name="notification_due_idx",
            ),
            # The run page: WHERE run_id = ... ORDER BY created_at.
            models.Index(fields=["run", "created_at"], name="notification_run_idx"),
            # My notifications: WHERE user_id = ... AND status <> off ORDER BY created_at, id.
            models.Index(
                fields=["user", "created_at"],
                condition=~models.Q(status="off"),
                name="notification_user_idx",
            ),
            # The unread count in the navigation: WHERE user_id = ... AND read_at IS NULL AND
            # status <> off (an index-only count of a person's unread rows).
            models.Index(
                fields=["user"],
                condition=models.Q(read_at__isnull=True) & ~models.Q(status="off"),
                name="notification_unread_idx",
            ),
            # The digest: WHERE status = digest AND user_id = ...
            models.Index(
                fields=["user", "created_at"],
                condition=models.Q(status="digest"),
                name="notification_digest_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} for {self.user} about run {self.run_id} ({self.status})"

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=status, source=Status.PENDING, target=Status.SENT)
    def send(self, *, now: Any) -> None:
        self.sent_at = now
        self.last_error = ""

    @transition(field=status, source=Status.PENDING, target=Status.FAILED)
    def give_up(self, *, error: str) -> None:
        self.last_error = error

    @transition(field=status, source=Status.DIGEST, target=Status.DIGESTED)
    def send_in_digest(self, *, now: Any) -> None:
        self.sent_at = now


class Preference(models.Model):
    """How a person wants to hear of one kind of event; no row means at once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.IMMEDIATE)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "kind"], name="preference_one_per_kind")
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.kind} {self.mode}"
