"""The run record: intake, state machine, checkpoints, stage timings, outbox and audit."""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from django_fsm import ConcurrentTransition, ConcurrentTransitionMixin, FSMField, transition

from audit.models import AuditEvent
from automation.schemas import FIELD_PATH_LIMIT, SUBJECT_LIMIT, ClassifierDecision
from core.codes import Outcome

__all__ = ["AuditEvent"]  # re-exported: every run's history is read from here


class State(models.TextChoices):
    RECEIVED = "received"
    VALIDATED = "validated"
    NORMALIZED = "normalized"
    ENRICHED = "enriched"
    CLASSIFIED = "classified"
    APPROVAL_REQUIRED = "approval_required"
    APPROVED = "approved"
    EXECUTING = "executing"
    COMPLETED = "completed"
    BLOCKED = "blocked"
    NEEDS_REVIEW = "needs_review"
    FAILED = "failed"


def run_holds_stage(run: Any) -> bool:
    """A run held because a stage ran out of attempts (worth another try)."""
    return run.outcome in RETRYABLE_STAGE_HOLDS


def run_reading_correctable(run: Any) -> bool:
    """A hold a person ends by correcting the reading (not an effect's or a policy's)."""
    return run.outcome in CORRECTABLE_HOLDS


def run_has_stored_reading(run: Any) -> bool:
    """Whether a resume can continue this run: its last checkpoint holds a reading that fits
    the classifier's schema and that policy has not judged yet (one stored before a crash, or
    imported by an operator for a run whose own reading was unusable). A run whose reading
    was judged already (held by policy, or for its effect) has nothing to resume."""
    if run.pk is None:
        return False
    checkpoint = run.checkpoints.order_by("-sequence").first()
    stored = (checkpoint.data if checkpoint else {}).get("classification")
    if not isinstance(stored, dict) or stored == run.classification:
        return False
    try:
        ClassifierDecision.model_validate(stored)
    except ValueError:
        return False
    return True


def run_holds_effect(run: Any) -> bool:
    """A run held because its effect failed or its outcome is unknown (not any other hold)."""
    return run.outcome in EFFECT_HOLDS


def _queue_for(outcome: str) -> str:
    """The exception queue a run lands in for this outcome ('' for none)."""
    if outcome in ANSWERED_FAILURES or outcome in (Outcome.APPROVAL_STALE, ""):
        return ""
    return outcome


# In this order in the open-run indexes' condition (Run.Meta) and the queries they serve.
TERMINAL_STATE_LIST = [State.COMPLETED, State.BLOCKED, State.FAILED]
TERMINAL_STATES = frozenset(TERMINAL_STATE_LIST)
NON_TERMINAL_STATES = [s for s in State if s not in TERMINAL_STATES]
# States in which a worker owes the run its next step (the sweep looks for these).
WORKING_STATES = [
    State.RECEIVED,
    State.VALIDATED,
    State.NORMALIZED,
    State.ENRICHED,
    State.CLASSIFIED,
    State.APPROVED,
    State.EXECUTING,
]


# Holds of a run whose effect could not be delivered (or whose outcome is unknown).
EFFECT_HOLDS = frozenset({Outcome.EFFECT_UNAVAILABLE, Outcome.EFFECT_UNCERTAIN})
# Failures answered to the sender or decided by a person: no exception queue for them.
ANSWERED_FAILURES = frozenset(
    {Outcome.INVALID_EVENT, Outcome.UNSUPPORTED_REQUEST, Outcome.APPROVAL_REJECTED}
)
# Holds a person can end by correcting the interpretation.
CORRECTABLE_HOLDS = frozenset(
    {
        Outcome.LOW_CONFIDENCE,
        Outcome.RISK_SIGNAL,  # confirming or correcting the reading is reading the run
        Outcome.CLASSIFICATION_INVALID,
        Outcome.EXTRACTION_INVALID,
        Outcome.RETRY_EXHAUSTED,
    }
)
# Holds a person may send back to the classifier.
RETRYABLE_STAGE_HOLDS = frozenset({Outcome.RETRY_EXHAUSTED})
# Every exception queue a run can be in (Run.queue holds one of these, or ''): the outcome
# of a hold or of a failure, less those no queue takes (answered to the sender, or an
# approval gone stale) and those that are no failure (done; the intake's answers to a
# repeated id). A queue page for any other name is a 404.
QUEUE_NAMES = frozenset(
    outcome.value
    for outcome in Outcome
    if _queue_for(outcome)
    and outcome not in (Outcome.COMPLETED, Outcome.IDEMPOTENT_REPLAY, Outcome.IDEMPOTENCY_CONFLICT)
)


class Customer(models.Model):
    """A known customer: what a reference number or a sender's domain is checked against."""

    reference = models.CharField(max_length=40, unique=True, help_text="e.g. CUST-10042")
    name = models.CharField(max_length=200)
    account_tier = models.CharField(
        max_length=20, choices=[("standard", "standard"), ("priority", "priority")]
    )
    email_domains = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["reference"]

    def __str__(self) -> str:
        return f"{self.reference} {self.name}"


class IntakeChannel(models.Model):
    """Where requests come from, and how runs from there are interpreted and versioned."""

    name = models.SlugField(max_length=100, unique=True)
    classifier = models.CharField(max_length=50, default="recorded")
    classifier_version = models.CharField(max_length=100, default="recorded-classifier-1")
    workflow_version = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=100)
    # Pinned policy version; empty means "the version active when the run is decided".
    policy_version = models.CharField(max_length=100, blank=True)
    max_classifier_attempts = models.PositiveSmallIntegerField(default=3)
    # E-mail is one request whichever way it arrives (the mailbox, the API): every channel
    # that takes real mail shares one identity scope for it (MAIL_SCOPE). A sandbox, such as a
    # classifier evaluation, keeps its mail to itself so it never meets, or waits for, real mail.
    shares_mail_identity = models.BooleanField(default=True)
    # Classifiers that read every run of the channel beside the live one, without acting
    # (shadow mode): their readings are stored for comparison, never decided on.
    shadow_classifiers = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


# The identity scope of e-mail on every channel that shares mail identity. A JSON event's
# scope is its channel's name (what effect keys were always made of); a channel's name is a
# slug and "@" is no slug character, so the two kinds of scope never meet.
MAIL_SCOPE = "@mail"


class IntakeRecord(models.Model):
    """The raw request exactly as received, written before any validation. Never modified.

    A request over the size limit (`services.intake.message_limit`) is kept as a refused
    record: its size, the SHA-256 of all of it and only its first bytes (REFUSED_HEAD_BYTES),
    never the whole body.
    """

    channel = models.ForeignKey(IntakeChannel, on_delete=models.PROTECT)
    raw = models.BinaryField()
    content_type = models.CharField(max_length=200)
    source = models.CharField(max_length=200, help_text="who delivered it: API token, file")
    # Set only on a record kept after its admission failed: why it has no run.
    admission_error = models.TextField(blank=True, help_text="why no run was made, if none was")
    received_at = models.DateTimeField(auto_now_add=True)
    # The SHA-256 of `raw`, set on insert: how a folder read again knows which files it took
    # (services.mailbox), even a message that could not be read and so has no Message-ID.
    raw_sha256 = models.CharField(max_length=64, blank=True, editable=False)
    # Bytes of the request as it came: of all of it, also when only its head is kept.
    size = models.PositiveBigIntegerField(editable=False)
    # Over the size limit: `raw` is only its first bytes, and no event was read from it.
    refused = models.BooleanField(default=False, editable=False)

    class Meta:
        indexes = [
            # WHERE raw_sha256 = ... AND source = ... AND channel_id = ...: was this file
            # taken in before (services.mailbox); a digest names a few rows at most.
            models.Index(fields=["raw_sha256"], name="intake_raw_sha256_idx"),
        ]

    def __str__(self) -> str:
        return f"intake #{self.pk} via {self.channel_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("an intake record is never modified")
        self.set_digest()
        super().save(*args, **kwargs)

    def set_digest(self) -> None:
        """Stamp `raw_sha256` and `size`: save() does; so does a writer that inserts the row
        itself. A refused record comes with both, taken from the whole request."""
        if not self.refused:
            self.raw_sha256 = self.digest(self.raw)
            self.size = len(self.raw)

    @staticmethod
    def digest(raw: bytes | memoryview) -> str:
        return hashlib.sha256(bytes(raw)).hexdigest()

    @property
    def text(self) -> str:
        return bytes(self.raw).decode("utf-8", errors="replace")


class Run(ConcurrentTransitionMixin, models.Model):
    """One inbound request's journey. State changes only through the transitions below.

    Optimistic locking on two counts: the FSM mixin refuses a save whose state changed since
    the row was read, and `version` refuses any stale writer (see _do_update).
    """

    channel = models.ForeignKey(IntakeChannel, on_delete=models.PROTECT, related_name="runs")
    event_id = models.CharField(max_length=200, blank=True)
    # Where the event id is unique: the channel's name for a JSON event, MAIL_SCOPE for an
    # e-mail (its Message-ID names one request on every path that takes mail). Set when the run
    # is made (a replay keeps its original's) and part of the effect key, so every run of one
    # request reaches one effect.
    identity_scope = models.CharField(max_length=100)
    # True once the event passed the contract: only then does it own (scope, event_id).
    claims_identity = models.BooleanField(default=False)
    intake = models.ForeignKey(IntakeRecord, on_delete=models.PROTECT, related_name="runs")
    replay_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replays",
        db_index=False,  # run_replay_of_idx: replays only
    )
    # E-mail threads: the message this one answers (In-Reply-To, else the last References
    # entry), and the run of the nearest earlier message of the thread that Gatehouse has seen.
    reply_to_event_id = models.CharField(max_length=200, blank=True)  # run_reply_to_idx
    thread_parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="thread_replies",
        db_index=False,  # run_thread_parent_idx: replies only
    )
    state = FSMField(default=State.RECEIVED, choices=State.choices, protected=True)
    outcome = models.CharField(max_length=40, blank=True, choices=Outcome.choices)
    claimed_at = models.DateTimeField(null=True, blank=True)
    failure_field = models.CharField(max_length=FIELD_PATH_LIMIT, blank=True)
    failure_detail = models.TextField(blank=True)

    normalized = models.JSONField(null=True, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True)
    enrichment = models.JSONField(default=dict, blank=True)

    workflow_version = models.CharField(max_length=100)
    classifier_version = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=100)
    policy_version = models.CharField(max_length=100, blank=True)

    classification = models.JSONField(null=True, blank=True)
    category = models.CharField(max_length=50, blank=True)
    reason_code = models.CharField(max_length=100, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    route = models.CharField(max_length=50, blank=True)
    effect_name = models.CharField(max_length=50, blank=True)
    rules = models.JSONField(default=list, blank=True)
    # Signal rules whose hold a person has already read this run for (they hold it no more).
    signals_reviewed = models.JSONField(default=list, blank=True)

    queue = models.CharField(max_length=40, blank=True)
    # When the run entered its exception queue: its age there, whoever claims it meanwhile.
    queued_at = models.DateTimeField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_index=False,  # run_owner_idx: claimed runs only
    )
    classify_attempts = models.PositiveSmallIntegerField(default=0)
    # Attempts made before the latest retry a person asked for: the budget counts from here,
    # while attempt numbers keep counting (each attempt stays its own row).
    classify_attempts_spent = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When a worker message for this run was sent and not yet spent: while it is out, the
    # sweep leaves the run alone (core.dispatch.oldest_unspent says when it is lost).
    dispatched_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)

    class Meta:
        permissions = [
            ("recover_run", "Can retry, resume, replay, resolve and re-decide runs"),
            ("correct_run", "Can correct the extracted fields of a held run"),
            ("work_queue", "Can claim, assign and release exception queue items"),
        ]
        constraints = [
            # Event identity: two concurrent submissions of one event make one run, whichever
            # path each came by. Also the lookup of the identity's owner and of a mail thread's
            # runs: WHERE identity_scope = ... AND event_id [IN] ... AND claims_identity AND
            # replay_of IS NULL.
            models.UniqueConstraint(
                fields=["identity_scope", "event_id"],
                condition=models.Q(claims_identity=True, replay_of__isnull=True),
                name="run_unique_event_per_scope",
            )
        ]
        indexes = [
            # The sweep: WHERE state IN (working states) AND next_attempt_at <= now.
            models.Index(fields=["state", "next_attempt_at"], name="run_state_due_idx"),
            # Exception queues: WHERE state = needs_review AND outcome = ... ORDER BY updated_at.
            models.Index(fields=["outcome", "state", "updated_at"], name="run_queue_idx"),
            # Search by business key.
            models.Index(fields=["event_id"], name="run_event_id_idx"),
            # Held runs only (a small part of all runs): the queues overview, WHERE queue <> ''
            # GROUP BY queue (count, oldest, claimed, oldest still held: read from the index
            # alone), and one queue's page, WHERE queue = ... ORDER BY queued_at, id (keyset
            # pages).
            models.Index(
                fields=["queue", "queued_at", "id"],
                include=["owner", "state"],
                condition=~models.Q(queue=""),
                name="run_held_queue_idx",
            ),
            # Links most runs do not have (only a replay, a reply by mail, a claimed run has
            # one): each index holds only the runs that have it, so the insert of a run and
            # each step's update of it write none of them. WHERE replay_of_id = ... (a run's
            # replays; the replay chains of approvals.selectors: WHERE replay_of_id IS NOT
            # NULL), WHERE thread_parent_id = ..., WHERE reply_to_event_id = ... (a mail
            # thread's earlier replies), WHERE owner_id = ... (who works what).
            models.Index(
                fields=["replay_of"],
                condition=models.Q(replay_of__isnull=False),
                name="run_replay_of_idx",
            ),
            models.Index(
                fields=["thread_parent"],
                condition=models.Q(thread_parent__isnull=False),
                name="run_thread_parent_idx",
            ),
            models.Index(
                fields=["reply_to_event_id"],
                condition=~models.Q(reply_to_event_id=""),
                name="run_reply_to_idx",
            ),
            models.Index(
                fields=["owner"], condition=models.Q(owner__isnull=False), name="run_owner_idx"
            ),
            # Search by the input's fingerprint: WHERE fingerprint = ... (admin, queue search).
            models.Index(fields=["fingerprint"], name="run_fingerprint_idx"),
            # Search by customer reference over every run, finished or not (the open-run index
            # below serves only the enrichment of open runs).
            models.Index(
                KeyTransform("reference", KeyTransform("customer", "enrichment")),
                name="run_customer_ref_idx",
            ),
            # Reports: WHERE created_at >= ... AND created_at < ... (runs received per week,
            # rates before and after a policy activation).
            models.Index(fields=["created_at"], name="run_created_idx"),
            # Enrichment: open runs of the same channel and request type, or of the same
            # customer (WHERE NOT state IN (terminal) AND ...): only unfinished runs are
            # indexed, so the count never reads the history.
            models.Index(
                models.F("channel"),
                KeyTransform("request_type", "normalized"),
                condition=~models.Q(state__in=TERMINAL_STATE_LIST),
                name="run_open_by_type_idx",
            ),
            models.Index(
                KeyTransform("reference", KeyTransform("customer", "enrichment")),
                condition=~models.Q(state__in=TERMINAL_STATE_LIST),
                name="run_open_by_customer_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"run #{self.pk} {self.event_id or '(no event id)'}"

    # --- optimistic locking on `version` -------------------------------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            super().save(*args, **kwargs)
            return
        update_fields = kwargs.get("update_fields")
        if update_fields is not None:
            kwargs["update_fields"] = {*update_fields, "version", "updated_at"}
        self.version += 1
        try:
            super().save(*args, **kwargs)
        except Exception:
            self.version -= 1
            raise

    def _do_update(
        self,
        base_qs: Any,
        using: Any,
        pk_val: Any,
        values: Any,
        update_fields: Any,
        forced_update: Any,
        *args: Any,
        **kwargs: Any,
    ) -> bool:
        # A writer holding an older copy matches no row here and is refused below.
        updated = super()._do_update(
            base_qs.filter(version=self.version - 1),
            using,
            pk_val,
            values,
            update_fields,
            forced_update,
            *args,
            **kwargs,
        )
        if not updated and type(self)._base_manager.using(using).filter(pk=pk_val).exists():
            raise ConcurrentTransition(f"run {pk_val} changed since it was read")
        return bool(updated)

    @property
    def state_fields(self) -> tuple[FSMField, ...]:
        """The mixin's state fields, found once: it looks for them among every field of
        the model each time a run is made or read, and every step reads one."""
        return _RUN_STATE_FIELDS

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    # --- transitions: each sets its own fields, nothing else -----------------------------

    @transition(field=state, source=State.RECEIVED, target=State.VALIDATED)
    def validate(self, *, event_id: str) -> None:
        self.event_id = event_id
        self.claims_identity = True

    @transition(field=state, source=State.VALIDATED, target=State.NORMALIZED)
    def normalize(self, *, normalized: dict[str, Any], fingerprint: str) -> None:
        self.normalized = normalized
        self.fingerprint = fingerprint

    @transition(field=state, source=State.NORMALIZED, target=State.ENRICHED)
    def enrich(self, *, enrichment: dict[str, Any]) -> None:
        self.enrichment = enrichment

    @transition(field=state, source=State.ENRICHED, target=State.ENRICHED)
    def schedule_classifier_retry(self, *, next_attempt_at: Any) -> None:
        self.next_attempt_at = next_attempt_at
        self.lease_expires_at = None

    @transition(field=state, source=State.ENRICHED, target=State.CLASSIFIED)
    def classify(self, *, decision: dict[str, Any]) -> None:
        self._accept_reading(decision)

    @transition(
        field=state,
        source=State.NEEDS_REVIEW,
        target=State.CLASSIFIED,
        conditions=[lambda run: run_reading_correctable(run)],
        permission="automation.correct_run",
        custom={
            "action": "correct",
            "label": "Correct the reading",
            "help_text": "Fix the category, effect or fields the classifier read; policy then "
            "decides again with your reading.",
        },
    )
    def correct_reading(self, *, decision: dict[str, Any]) -> None:
        if self.outcome == Outcome.RISK_SIGNAL:
            # A person read the run the signals held: those holds are done for this run.
            held = {r["rule_id"] for r in self.rules if r["rule_id"].startswith("signal.")}
            self.signals_reviewed = sorted(held | set(self.signals_reviewed))
        self._accept_reading(decision)

    @transition(
        field=state,
        source=[State.ENRICHED, State.NEEDS_REVIEW],
        target=State.CLASSIFIED,
        conditions=[lambda run: run_has_stored_reading(run)],
        permission="automation.recover_run",
        custom={
            "action": "resume",
            "label": "Resume from the last checkpoint",
            "help_text": "Continue with the reading stored at the last checkpoint; policy "
            "decides again, no classifier call.",
        },
    )
    def resume(self, *, decision: dict[str, Any]) -> None:
        self._accept_reading(decision)

    def _accept_reading(self, decision: dict[str, Any]) -> None:
        self.classification = decision
        self.category = decision["category"]
        self.reason_code = decision["reason_code"]
        self.confidence = decision.get("confidence")
        self._clear_hold()

    @transition(field=state, source=State.CLASSIFIED, target=State.APPROVAL_REQUIRED)
    def require_approval(self, *, decided: dict[str, Any]) -> None:
        self._record_decision(decided)

    @transition(field=state, source=State.APPROVAL_REQUIRED, target=State.APPROVED)
    def approve(self) -> None:
        self._enter_queue("")
        self.outcome = ""

    @transition(
        field=state,
        source=State.APPROVAL_REQUIRED,
        target=State.CLASSIFIED,
        permission="automation.recover_run",
        custom={
            "admin": True,
            "action": "reconsider",
            "label": "Decide again",
            "help_text": "Send the run through policy again under the active version; "
            "its open approval request becomes stale and a fresh one is opened if needed.",
        },
    )
    def reconsider(self) -> None:
        self._enter_queue("")
        self.outcome = ""

    @transition(field=state, source=State.APPROVED, target=State.APPROVAL_REQUIRED)
    def invalidate_approval(self, *, outcome: str) -> None:
        # The approval no longer matches the run: wait for a fresh one.
        self.outcome = outcome
        self._enter_queue(_queue_for(outcome))

    @transition(field=state, source=State.APPROVAL_REQUIRED, target=State.APPROVAL_REQUIRED)
    def refuse_approval(self, *, outcome: str) -> None:
        self.outcome = outcome
        self._enter_queue(_queue_for(outcome))

    @transition(field=state, source=State.CLASSIFIED, target=State.EXECUTING)
    def execute(self, *, decided: dict[str, Any]) -> None:
        self._record_decision(decided)

    @transition(field=state, source=State.APPROVED, target=State.EXECUTING)
    def execute_approved(self) -> None:
        self._clear_hold()

    @transition(
        field=state,
        source=State.NEEDS_REVIEW,
        target=State.EXECUTING,
        conditions=[lambda run: run_holds_effect(run)],
        permission="automation.recover_run",
        custom={
            "admin": True,
            "action": "retry_effect",
            "label": "Retry the delivery",
            "help_text": "Deliver the held effect again under the same key, with a fresh "
            "attempt budget; its system will not do it twice.",
        },
    )
    def retry_effect(self) -> None:
        self._clear_hold()

    @transition(field=state, source=State.EXECUTING, target=State.COMPLETED)
    def complete(self, *, finished_at: Any) -> None:
        self.outcome = Outcome.COMPLETED
        self.finished_at = finished_at
        self.lease_expires_at = None

    @transition(field=state, source=State.CLASSIFIED, target=State.BLOCKED)
    def block(self, *, decided: dict[str, Any], finished_at: Any) -> None:
        self._record_decision(decided)
        self.outcome = Outcome.POLICY_BLOCK
        self.finished_at = finished_at

    @transition(
        field=state,
        source=[State.ENRICHED, State.CLASSIFIED, State.EXECUTING],
        target=State.NEEDS_REVIEW,
    )
    def hold(
        self,
        *,
        outcome: str,
        field: str = "",
        detail: str = "",
        decided: dict[str, Any] | None = None,
    ) -> None:
        if decided is not None:  # held by policy (low confidence): its decision is kept
            self._record_decision(decided)
        self.outcome = outcome
        self.failure_field = field
        self.failure_detail = detail
        self._enter_queue(outcome)
        self.next_attempt_at = None
        self.lease_expires_at = None

    @transition(field=state, source=NON_TERMINAL_STATES, target=State.FAILED)
    def fail(
        self,
        *,
        outcome: str,
        field: str = "",
        detail: str = "",
        finished_at: Any,
        rules: list[dict[str, Any]] | None = None,
    ) -> None:
        if rules is not None:  # refused by a rule (an unsupported request): the rule is kept
            self.rules = rules
        self.outcome = outcome
        self.failure_field = field
        self.failure_detail = detail
        self.finished_at = finished_at
        self._enter_queue(_queue_for(outcome))
        self.next_attempt_at = None
        self.lease_expires_at = None

    @transition(
        field=state,
        source=State.NEEDS_REVIEW,
        target=State.ENRICHED,
        conditions=[lambda run: run_holds_stage(run)],
        permission="automation.recover_run",
        custom={
            "admin": True,
            "action": "retry",
            "label": "Retry the classifier",
            "help_text": "Call the classifier again with a fresh attempt budget.",
        },
    )
    def retry_stage(self) -> None:
        self.classify_attempts_spent = self.classify_attempts
        self._clear_hold()

    @transition(
        field=state,
        source=State.NEEDS_REVIEW,
        target=State.COMPLETED,
        permission="automation.recover_run",
        custom={
            "action": "resolve",
            "label": "Resolved by hand",
            "help_text": "Record that you did what the run was for (say how in the evidence); "
            "the run is done and nothing is sent.",
        },
    )
    def resolve_by_hand(self, *, finished_at: Any) -> None:
        # A person did what the run was for (or confirmed the effect happened): recorded with
        # their evidence in a RecoveryAction.
        self.outcome = Outcome.COMPLETED
        self._enter_queue("")
        self.finished_at = finished_at

    @transition(
        field=state,
        source=State.NEEDS_REVIEW,
        target=State.FAILED,
        permission="automation.recover_run",
        custom={
            "action": "abandon",
            "label": "Abandon",
            "help_text": "Give the run up: nothing is sent and it leaves the queue; say why in "
            "the evidence.",
            "danger": True,
        },
    )
    def abandon(self, *, finished_at: Any) -> None:
        # Given up by a person: the hold's outcome code stays as the reason.
        self._enter_queue("")
        self.finished_at = finished_at

    @transition(field=state, source=State.FAILED, target=State.FAILED)
    def close_exception(self) -> None:
        """A failed run taken out of its exception queue (replayed or acknowledged)."""
        self._enter_queue("")

    @transition(
        field=state,
        source=TERMINAL_STATE_LIST,
        target=None,  # a replay is a new run: this one stays as it ended
        permission="automation.recover_run",
        custom={
            "action": "replay",
            "label": "Replay",
            "help_text": "Start a new run from the stored input under today's policy; an "
            "effect already delivered is not delivered again.",
        },
    )
    def replay(self) -> None:
        """A finished run replayed as a new one: it stays as it ended, out of any queue."""
        self._enter_queue("")

    def _enter_queue(self, queue: str) -> None:
        if queue != self.queue:
            self.queued_at = timezone.now() if queue else None
        self.queue = queue

    def _record_decision(self, decided: dict[str, Any]) -> None:
        self.policy_version = decided["policy_version"]
        self.route = decided.get("route") or ""
        self.effect_name = decided.get("effect") or ""
        self.rules = decided["rules"]

    def _clear_hold(self) -> None:
        self.outcome = ""
        self.failure_field = ""
        self.failure_detail = ""
        self._enter_queue("")
        self.next_attempt_at = None
        self.lease_expires_at = None


_RUN_STATE_FIELDS = tuple(f for f in Run._meta.fields if isinstance(f, FSMField))


class Checkpoint(models.Model):
    """A durable point to continue from: state, versions and the data needed to go on."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="checkpoints")
    sequence = models.PositiveIntegerField()
    state = models.CharField(max_length=40, choices=State.choices)
    versions = models.JSONField()
    data = models.JSONField(default=dict)
    source = models.CharField(max_length=40, default="pipeline")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["run", "sequence"], name="checkpoint_unique_seq")
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.sequence} of run {self.run_id} ({self.state})"


class StageName(models.TextChoices):
    """The stages a run goes through, in the order it meets them (StageRecord.stage)."""

    INTAKE = "intake"
    VALIDATE = "validate"
    NORMALIZE = "normalize"
    ENRICH = "enrich"
    CLASSIFY = "classify"
    DECIDE = "decide"
    APPROVE = "approve"
    EXECUTE = "execute"
    COMPLETE = "complete"


class StageOutcome(models.TextChoices):
    """What one stage attempt came to (StageRecord.outcome): the reports count hand-offs to
    people by stage and outcome. Where a run's outcome code says it, the value is that code."""

    OK = "ok"
    ACCEPTED = "accepted"
    INVALID_EVENT = "invalid_event"
    UNSUPPORTED_REQUEST = "unsupported_request"
    RETRY_SCHEDULED = "retry_scheduled"
    RETRY_EXHAUSTED = "retry_exhausted"
    CLASSIFICATION_INVALID = "classification_invalid"
    EXTRACTION_INVALID = "extraction_invalid"
    CORRECTED = "corrected"  # a person's reading replaced the classifier's
    RESUMED = "resumed"  # from a stored checkpoint
    POLICY_BLOCK = "policy_block"
    LOW_CONFIDENCE = "low_confidence"
    RISK_SIGNAL = "risk_signal"  # a signal rule sent the run to a person (hold or approval)
    APPROVAL_REQUIRED = "approval_required"
    AUTHORIZED = "authorized"  # by policy, or by an approval still bound to the run
    APPROVED = "approved"
    APPROVAL_REJECTED = "approval_rejected"
    DELIVERED = "delivered"
    ALREADY_DELIVERED = "already_delivered"  # a replay that reached a delivered effect
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"
    UNAVAILABLE = "unavailable"  # the delivery budget ran out
    UNWRITABLE = "unwritable"  # the local record cannot be written as it is


class StageRecord(models.Model):
    """One attempt at one stage, with its timing: what the timeline and reports read."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="stages")
    stage = models.CharField(max_length=40)
    attempt = models.PositiveSmallIntegerField(default=1)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    outcome = models.CharField(max_length=40)
    error_class = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["run", "started_at", "pk"]
        indexes = [
            # Stage duration reports: WHERE stage = ... AND started_at BETWEEN ...
            models.Index(fields=["stage", "started_at"], name="stage_report_idx"),
            # The dashboard's stage durations, every stage of a period: WHERE started_at >= ...
            # AND started_at < ... GROUP BY stage.
            models.Index(fields=["started_at"], name="stage_started_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.stage} #{self.attempt} of run {self.run_id}: {self.outcome}"


class ClassifierResult(models.TextChoices):
    """What one classifier call came to (ClassificationAttempt.outcome)."""

    VALID = "valid"
    INVALID = "invalid"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"


class ClassificationAttempt(models.Model):
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

    channel = models.ForeignKey(IntakeChannel, on_delete=models.CASCADE)
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


class EffectStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    RETRY_WAIT = "retry_wait"
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"


class Effect(models.Model):
    """The outbox. One row per (request, effect): the unique key makes a second one impossible."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="effects")
    name = models.CharField(max_length=50)
    idempotency_key = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    # What authorised it: the policy version and, where required, the approval request.
    authorization = models.JSONField()
    status = models.CharField(
        max_length=20, choices=EffectStatus.choices, default=EffectStatus.PENDING
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


class DeliveryResult(models.TextChoices):
    """What one delivery attempt came to (EffectAttempt.outcome, an adapter's Delivery)."""

    DELIVERED = "delivered"
    RETRY = "retry"  # not delivered, worth another attempt (5xx, timeout, refused connection)
    REJECTED = "rejected"  # refused for good (4xx, a record that cannot be written)
    UNCERTAIN = "uncertain"  # sent, no answer: it may have been performed
    LOST = "lost"  # the worker died before it recorded the attempt


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


class LocalEffectRecord(models.Model):
    """What a local adapter writes. Keyed by the effect's key, so a repeat changes nothing."""

    idempotency_key = models.CharField(max_length=64, unique=True)
    run = models.ForeignKey(Run, on_delete=models.PROTECT)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


class FollowUp(LocalEffectRecord):
    """A follow-up task for the route's team."""

    route = models.CharField(max_length=50)
    subject = models.CharField(max_length=SUBJECT_LIMIT)  # the contract's limit: held whole

    def __str__(self) -> str:
        return f"follow-up for {self.route}: {self.subject}"


class AccountReview(LocalEffectRecord):
    """An item in the account review queue."""

    account_tier = models.CharField(max_length=20)
    subject = models.CharField(max_length=SUBJECT_LIMIT)  # the contract's limit: held whole

    def __str__(self) -> str:
        return f"account review: {self.subject}"


class InternalNotification(LocalEffectRecord):
    """A notification to the route's internal channel."""

    route = models.CharField(max_length=50)
    message = models.TextField()

    def __str__(self) -> str:
        return f"notification to {self.route}"


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
    # A batch's action only: retry the effect of each run (its items are recorded as RETRY).
    RETRY_EFFECT = "retry_effect"


class BatchStatus(models.TextChoices):
    """How far a batch (a RecoveryBatch, a Simulation) has got."""

    PREVIEW = "preview"  # a batch shown to a person before it starts (never a simulation)
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


class ProgressJob(models.Model):
    """Work over the runs of a time window, chunk by chunk, with its progress on the row:
    the position (`done`) commits with each chunk, so a restarted worker carries on."""

    since = models.DateTimeField()
    until = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    run_ids = models.JSONField(default=list)
    done = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=20, choices=BatchStatus.choices, default=BatchStatus.QUEUED
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def total(self) -> int:
        return len(self.run_ids)


class RecoveryBatch(ProgressJob):
    """A batch recovery: which runs, what to do, and how far it got (the progress page)."""

    action = models.CharField(max_length=20)  # RecoveryKind.RETRY or REPLAY
    queue = models.CharField(max_length=40)
    reason = models.TextField()
    succeeded = models.PositiveIntegerField(default=0)
    failures = models.JSONField(default=list)  # [{"run": id, "reason": ...}]
    # What a person was shown before starting it (automation.services.preview): a row per
    # run and the active policy then. It starts only while young and still true.
    preview = models.JSONField(default=list, blank=True)
    previewed_at = models.DateTimeField(null=True, blank=True)
    preview_policy = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "recovery batches"

    def __str__(self) -> str:
        return f"{self.action} {self.queue} ({self.done}/{self.total})"


class RecoveryAction(models.Model):
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


class ApiToken(models.Model):
    """A bearer token for an integrator; only its SHA-256 is stored."""

    name = models.CharField(max_length=100, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    channel = models.ForeignKey(IntakeChannel, on_delete=models.PROTECT)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


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


class QAReview(models.Model):
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
    status = models.CharField(max_length=20, choices=QAStatus.choices, default=QAStatus.OPEN)
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

    channel = models.ForeignKey(IntakeChannel, on_delete=models.PROTECT)
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
