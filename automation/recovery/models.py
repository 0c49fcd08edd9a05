"""Work on many runs at once: recovery batches and their actions, and policy simulations."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from automation.runs.models import Run
from core.history import AppendOnly


class RecoveryKind(models.TextChoices):
    """What a person did in a RecoveryAction (and what a RecoveryBatch does to its runs)."""

    CLAIM = "claim"
    ASSIGN = "assign"
    RELEASE = "release"
    CORRECT = "correct"
    RETRY = "retry"
    RESUME = "resume"
    REPLAY = "replay"
    RESOLVE = "resolve"
    ABANDON = "abandon"
    # A rejected run corrected by a person: a replay that carries their reading.
    CORRECT_REJECTED = "correct_rejected"
    # A batch's action only: retry the effect of each run (its items are recorded as RETRY).
    RETRY_EFFECT = "retry_effect"


class BatchStatus(models.TextChoices):
    """How far a batch (a RecoveryBatch, a Simulation) has got."""

    PREVIEW = "preview"  # a batch shown to a person before it starts (never a simulation)
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


# A job with runs still to work (a preview is not yet one).
WORKABLE = [BatchStatus.QUEUED, BatchStatus.RUNNING]


class ProgressJob(ConcurrentTransitionMixin, models.Model):
    """Work over the runs of a time window, chunk by chunk, with its progress on the row:
    the position (`done`) commits with each chunk, so a restarted worker carries on.

    Its status changes only through the transitions below; the services lock the row first.
    """

    since = models.DateTimeField()
    until = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    run_ids = models.JSONField(default=list)
    done = models.PositiveIntegerField(default=0)
    status = FSMField(
        max_length=20, choices=BatchStatus.choices, default=BatchStatus.QUEUED, protected=True
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def total(self) -> int:
        return len(self.run_ids)

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=status, source=WORKABLE, target=BatchStatus.RUNNING)
    def advance(self) -> None:
        """A chunk of its runs was worked (the caller moves `done`)."""

    @transition(field=status, source=WORKABLE, target=BatchStatus.FINISHED)
    def finish(self, *, now: Any) -> None:
        self.finished_at = now


class RecoveryBatch(ProgressJob):
    """A batch recovery: which runs, what to do, and how far it got (the progress page)."""

    action = models.CharField(max_length=20)  # RecoveryKind.RETRY or REPLAY
    queue = models.CharField(max_length=40)
    reason = models.TextField()
    succeeded = models.PositiveIntegerField(default=0)
    failures = models.JSONField(default=list)  # [{"run": id, "reason": ...}]
    # What a person was shown before starting it (automation.recovery.preview): a row per
    # run and the active policy then. It starts only while young and still true.
    preview = models.JSONField(default=list, blank=True)
    previewed_at = models.DateTimeField(null=True, blank=True)
    preview_policy = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Who started it: each item is done as them, on their permission and on their record
    # (separation of duties: they acted on every run it works). Blank on a batch started
    # before this was kept, whose items are done as its creator.
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )

    class Meta:
        verbose_name_plural = "recovery batches"

    def __str__(self) -> str:
        return f"{self.action} {self.queue} ({self.done}/{self.total})"

    @transition(field="status", source=BatchStatus.QUEUED, target=BatchStatus.PREVIEW)
    def show_preview(self, *, rows: list[dict[str, Any]], now: Any, policy: str) -> None:
        """What a person is shown before starting it; it waits for them."""
        self.preview = rows
        self.previewed_at = now
        self.preview_policy = policy

    @transition(field="status", source=BatchStatus.PREVIEW, target=BatchStatus.QUEUED)
    def start(self, *, run_ids: list[int], user: Any, now: Any) -> None:
        self.run_ids = run_ids
        # Its items are done as the person who starts it, who may not be the one who
        # prepared it: both are on the record of every run it works (separation of duties).
        self.started_by = user
        self.started_at = now


class RecoveryAction(AppendOnly):
    """Who did what recovery operation on which run, why, and with what result."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="recovery_actions")
    action = models.CharField(max_length=30)  # a RecoveryKind
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    reason = models.TextField(blank=True)
    result = models.CharField(max_length=60)
    data = models.JSONField(default=dict, blank=True)
    batch = models.ForeignKey(RecoveryBatch, null=True, blank=True, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.action} on run {self.run_id} by {self.actor_id}: {self.result}"


class Simulation(ProgressJob):
    """A dry run of a policy version over past runs' stored interpretations: no model, no effect."""

    policy_version = models.CharField(max_length=100)
    # The version active when it started: what each run is judged by beside the simulated
    # one, so the impact is what activating it would change. Blank: none was active (or made
    # before this was kept), and each run is judged by the version that first decided it.
    baseline_version = models.CharField(max_length=100, blank=True)
    # A command may start one with nobody named: the one field that differs from the base
    # (a batch always has its person), so the type narrows the other way.
    created_by = models.ForeignKey(  # type: ignore[assignment]
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    # [{"run", "event_id", "old", "new", "first", "first_version", "rules": [...]}] for every
    # run the simulated version decides otherwise than the baseline: old is the baseline's
    # decision, new the simulated one's, first the decision of the version that first decided it
    changes = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"simulation of {self.policy_version} ({self.done}/{self.total})"
