"""Readings of requests: classifier attempts and recorded outcomes, trained models, QA
reviews and labels, shadow readings and promotions."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from automation.runs.models import Run
from core.history import AppendOnly


class ClassifierResult(models.TextChoices):
    """What one classifier call came to (ClassificationAttempt.outcome)."""

    VALID = "valid"
    INVALID = "invalid"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    # Turned away by the server's rate limit (429): not counted against the run's attempts.
    RATE_LIMITED = "rate_limited"


class ClassificationAttempt(AppendOnly):
    """Raw classifier output and its validation result. No hidden reasoning is stored."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="classifications")
    attempt = models.PositiveSmallIntegerField()
    classifier = models.CharField(max_length=50)
    classifier_version = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=100)
    outcome = models.CharField(max_length=40)  # a ClassifierResult
    raw_output = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    latency_ms = models.PositiveIntegerField()
    # What a model server reported the call cost (null: a local reader, or it did not say),
    # and that in money by the price table of the settings (GATEHOUSE_OPENAI_PRICES).
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt"], name="classification_unique_attempt")
        ]

    def __str__(self) -> str:
        return f"classification {self.attempt} of run {self.run_id}: {self.outcome}"


class RecordedOutcome(models.Model):
    """A stored classifier outcome for one attempt, replayed by the recorded classifier."""

    # By string reference: intake, which stamps a channel with its classifier, sits above.
    channel = models.ForeignKey("automation.IntakeChannel", on_delete=models.CASCADE)
    event_id = models.CharField(max_length=200)
    attempt = models.PositiveSmallIntegerField()
    outcome = models.JSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "event_id", "attempt"], name="recorded_outcome_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel_id}/{self.event_id} attempt {self.attempt}"


class ClassifierModel(models.Model):
    """A trained model of the `learned` classifier: a versioned artifact, never changed once
    stored. The version names its checksum, so a run's classifier_version names the exact
    model that read it. One version at most is active: the one the classifier uses."""

    version = models.CharField(max_length=40, unique=True)  # learned-<checksum prefix>
    checksum = models.CharField(max_length=64)  # sha256 of the artifact
    artifact = models.BinaryField()  # the fitted scikit-learn pipeline (pickle)
    trained_at = models.DateTimeField(default=timezone.now)
    training_size = models.PositiveIntegerField()
    categories = models.JSONField(default=list)
    cv_accuracy = models.FloatField(null=True)  # cross-validated, on the training set
    held_out = models.JSONField(default=dict)  # {set: {"right": n, "of": m}}
    sources = models.JSONField(default=list)  # what it was trained on
    is_active = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["is_active"],
                condition=models.Q(is_active=True),
                name="classifier_model_one_active",
            )
        ]

    def __str__(self) -> str:
        return self.version


class QAStatus(models.TextChoices):
    OPEN = "open"
    CONFIRMED = "confirmed"  # the reading was right
    CORRECTED = "corrected"  # the reading was wrong; the effect had already happened


class QAReview(ConcurrentTransitionMixin, models.Model):
    """A straight-through run policy sampled for a person to review after the fact. Made in
    the transaction that authorized the effect; it never holds the run or its effect.

    A correction re-runs nothing: the effect is done. It leaves the review waiting for an ops
    lead to reconcile (the `reconcile` queue) until someone says what was done about it."""

    run = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="qa_review")
    route = models.CharField(max_length=100)
    group = models.CharField(max_length=150)  # who reviews it
    policy_version = models.CharField(max_length=100)
    classifier_version = models.CharField(max_length=200)
    reading = models.JSONField()  # category, effect, confidence and fields, as judged
    status = FSMField(
        max_length=20, choices=QAStatus.choices, default=QAStatus.OPEN, protected=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="qa_reviews",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    correction = models.JSONField(default=dict, blank=True)  # category, effect, fields, note
    reconciled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="qa_reconciliations",
    )
    reconciled_at = models.DateTimeField(null=True, blank=True)
    reconcile_note = models.TextField(blank=True)

    class Meta:
        indexes = [
            # The QA queue: open reviews in order, by group.
            models.Index(
                fields=["group", "created_at", "id"],
                condition=models.Q(status="open"),
                name="qa_open_idx",
            ),
            # The reconcile queue: corrected after the effect, not yet reconciled.
            models.Index(
                fields=["reviewed_at", "id"],
                condition=models.Q(status="corrected", reconciled_at__isnull=True),
                name="qa_reconcile_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"QA of run #{self.run_id} ({self.status})"

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=status, source=QAStatus.OPEN, target=QAStatus.CONFIRMED)
    def confirm(self, *, user: Any, now: Any) -> None:
        self.reviewer, self.reviewed_at = user, now

    @transition(field=status, source=QAStatus.OPEN, target=QAStatus.CORRECTED)
    def correct(self, *, user: Any, now: Any, correction: dict[str, str]) -> None:
        self.reviewer, self.reviewed_at = user, now
        self.correction = correction


class LabelSource(models.TextChoices):
    QA_CONFIRMED = "qa_confirmed"
    QA_CORRECTED = "qa_corrected"
    CORRECTION = "correction"  # a held run corrected in the correction queue
    APPROVAL = "approval"  # an approver approved the effect the reading proposed


class Label(models.Model):
    """A person's judgement of one reading: measured truth for the learning loop. Who gave
    it and when, the reading judged, the classifier version that made it, and the category
    and effect the person says are right. Append-only."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="labels")
    source = models.CharField(max_length=20, choices=LabelSource.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(default=timezone.now)
    classifier_version = models.CharField(max_length=200)
    reading = models.JSONField()  # the category, effect and confidence judged
    category = models.CharField(max_length=50)  # what the person says it is
    effect = models.CharField(max_length=100)
    reading_was_right = models.BooleanField()

    class Meta:
        indexes = [models.Index(fields=["created_at", "id"], name="label_created_idx")]

    def __str__(self) -> str:
        return f"label of run #{self.run_id}: {self.category}/{self.effect}"


class ShadowOutcome(models.TextChoices):
    READ = "read"  # a reading that meets the decision schema
    INVALID = "invalid"  # an answer that does not
    FAILED = "failed"  # the classifier raised, or was unavailable
    TIMEOUT = "timeout"  # no answer within the deadline


class ShadowReading(models.Model):
    """A shadow classifier's reading of a run: stored for comparison with the live reading,
    never decided on, never an effect or a queue item. Made by a low-priority task of its
    own, after the run's classification committed; one per run and classifier."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="shadow_readings")
    classifier = models.CharField(max_length=50)
    classifier_version = models.CharField(max_length=200)
    outcome = models.CharField(max_length=20, choices=ShadowOutcome.choices)
    reading = models.JSONField(default=dict)  # the validated reading, when READ
    raw_output = models.JSONField(null=True)
    error = models.TextField(blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "classifier"], name="shadow_one_per_run")
        ]
        indexes = [models.Index(fields=["classifier", "created_at"], name="shadow_by_time_idx")]

    def __str__(self) -> str:
        return f"{self.classifier} on run #{self.run_id}: {self.outcome}"


class ClassifierPromotion(models.Model):
    """A channel's live classifier switched to a candidate on the evidence of a comparison,
    by a person with the right to change channels; rolled back by one action too."""

    channel = models.ForeignKey("automation.IntakeChannel", on_delete=models.PROTECT)
    from_classifier = models.CharField(max_length=50)
    from_version = models.CharField(max_length=200)
    to_classifier = models.CharField(max_length=50)
    to_version = models.CharField(max_length=200)
    evidence = models.JSONField()  # the comparison's figures it was based on
    promoted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="promotions"
    )
    promoted_at = models.DateTimeField(default=timezone.now)
    rolled_back_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="rollbacks",
    )
    rolled_back_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.channel_id}: {self.from_classifier} -> {self.to_classifier}"


class ModelServer(models.Model):
    """What every worker shares about one model server (a remote classifier's base URL): its
    rate, a pause it asked for, its circuit breaker and today's spend. One row per server,
    locked for a moment by each admission (automation.classifiers.servers)."""

    key = models.CharField(max_length=500, unique=True)
    # The rate limits as the next free moment of each (a generic cell rate algorithm: a
    # call takes the moment and moves it on by its share of the rate).
    requests_free_at = models.DateTimeField(null=True, blank=True)
    tokens_free_at = models.DateTimeField(null=True, blank=True)
    # Until when the server asked everybody to wait (a 429's Retry-After).
    paused_until = models.DateTimeField(null=True, blank=True)
    # The circuit breaker: failures in a row; open from opened_at until open_until, then one
    # probe (claimed until probe_until) decides whether it closes.
    failures = models.PositiveIntegerField(default=0)
    opened_at = models.DateTimeField(null=True, blank=True)
    open_until = models.DateTimeField(null=True, blank=True)
    probe_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # What today's calls cost, by the price table (the deployment's time zone).
    day = models.DateField(null=True, blank=True)
    spent = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.key


class LabelledSetStatus(models.TextChoices):
    RECEIVED = "received"  # stored, not read yet
    READ = "read"  # every row read, with its message: measured and trained on
    REFUSED = "refused"  # kept with its problems; no example was written


class LabelledSet(ConcurrentTransitionMixin, models.Model):
    """A labelled set an ops lead uploaded: the upload's bytes, stored as they came before
    anything is read from them, then the examples read from it. Every example is written in
    one transaction with the set's status, or none is (a refused upload keeps its bytes and
    its problems): a set is never half-read."""

    name = models.CharField(max_length=100)
    status = FSMField(
        max_length=20,
        choices=LabelledSetStatus.choices,
        default=LabelledSetStatus.RECEIVED,
        protected=True,
    )
    problems = models.JSONField(default=list, blank=True)  # why it was refused, each a line
    filename = models.CharField(max_length=255)
    raw = models.BinaryField()  # the upload (a .zip), as received
    sha256 = models.CharField(max_length=64)
    # customers.csv beside labels.csv, when the set has one: an evaluation loads it first.
    customers = models.BinaryField(blank=True, default=b"")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="labelled_sets"
    )
    uploaded_at = models.DateTimeField(default=timezone.now)
    # Rows read but not trained on or measured, by why ({"replay": 1, "invalid": 2}).
    left_out = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-uploaded_at", "-id"]
        constraints = [
            # A name is one set; a refused upload does not hold it.
            models.UniqueConstraint(
                fields=["name"],
                condition=~models.Q(status="refused"),
                name="labelled_set_unique_name",
            )
        ]

    def __str__(self) -> str:
        return self.name

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=status, source=LabelledSetStatus.RECEIVED, target=LabelledSetStatus.READ)
    def read(self, *, customers: bytes, left_out: dict[str, int]) -> None:
        """Every row read (the caller wrote its examples in this transaction)."""
        self.customers = customers
        self.left_out = left_out

    @transition(field=status, source=LabelledSetStatus.RECEIVED, target=LabelledSetStatus.REFUSED)
    def refuse(self, *, problems: list[str]) -> None:
        self.problems = problems


class LabelledExample(models.Model):
    """One row of a labelled set with the message it names, as bytes."""

    labelled_set = models.ForeignKey(LabelledSet, on_delete=models.CASCADE, related_name="examples")
    line = models.PositiveIntegerField()  # the row's line in labels.csv
    file = models.CharField(max_length=255)
    category = models.CharField(max_length=100)
    effect = models.CharField(max_length=100, blank=True)
    expected_intake = models.CharField(max_length=40)
    row = models.JSONField(default=dict)  # every column of the row, as written
    message = models.BinaryField()

    class Meta:
        ordering = ["labelled_set", "line"]
        constraints = [
            models.UniqueConstraint(
                fields=["labelled_set", "file"], name="labelled_example_unique_file"
            )
        ]

    def __str__(self) -> str:
        return f"{self.labelled_set_id}: {self.file}"


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class WorkerJob(ConcurrentTransitionMixin, models.Model):
    """A piece of work asked for from the console and done by one worker (an evaluation, a
    training): queued, claimed by one worker, then done or failed. Its concrete models
    declare `finished_at` and `error`."""

    status = FSMField(
        max_length=20,
        choices=EvaluationStatus.choices,
        default=EvaluationStatus.QUEUED,
        protected=True,
    )

    class Meta:
        abstract = True

    @classmethod
    def claim(cls, pk: int) -> bool:
        """Take the queued job for this worker; False if another took it (or it is done).

        The one place its status moves by a conditional update rather than a transition: the
        work that follows takes seconds to minutes and calls no database, so no row lock is
        held across it; the UPDATE ... WHERE status = queued is atomic, so of two deliveries
        of one message exactly one matches the row (the race it prevents: the work done
        twice).
        """
        return bool(
            cls._default_manager.filter(pk=pk, status=EvaluationStatus.QUEUED).update(
                status=EvaluationStatus.RUNNING
            )
        )

    @transition(field=status, source=EvaluationStatus.RUNNING, target=EvaluationStatus.FAILED)
    def fail(self, *, error: str, now: Any) -> None:
        self.error = error[:2000]
        self.finished_at = now


class LabelledSetEvaluation(WorkerJob):
    """A classifier measured on a stored labelled set: asked for from the console, run by a
    worker, its report kept (EvaluationReport.as_json) to be shown when it is done."""

    labelled_set = models.ForeignKey(
        LabelledSet, on_delete=models.CASCADE, related_name="evaluations"
    )
    classifier = models.CharField(max_length=50)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="evaluations"
    )
    requested_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"{self.classifier} on {self.labelled_set_id}: {self.status}"

    @transition(field="status", source=EvaluationStatus.RUNNING, target=EvaluationStatus.DONE)
    def succeed(self, *, report: dict[str, Any], now: Any) -> None:
        self.report = report
        self.finished_at = now


class ClassifierTraining(WorkerJob):
    """The learned reader trained on the business's stored sets, asked for from the console
    and run by a worker; the new version is put in shadow on the channel, never made live.
    What the training found is kept to be shown when it is done."""

    # By string reference: intake, which stamps a channel with its classifier, sits above.
    channel = models.ForeignKey("automation.IntakeChannel", on_delete=models.CASCADE)
    people = models.BooleanField(default=False)  # people's labels as well
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="trainings"
    )
    requested_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    version = models.CharField(max_length=40, blank=True)  # the model it made
    # trained_on, categories, held_out, too_few, not_a_type (TrainingReport's figures)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"training for {self.channel_id}: {self.status}"

    @transition(field="status", source=EvaluationStatus.RUNNING, target=EvaluationStatus.DONE)
    def succeed(self, *, version: str, result: dict[str, Any], now: Any) -> None:
        self.version = version
        self.result = result
        self.finished_at = now
