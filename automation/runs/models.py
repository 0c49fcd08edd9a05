"""The run record: its states and the transitions between them, checkpoints and stage timings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from django_fsm import ConcurrentTransition, ConcurrentTransitionMixin, FSMField, transition

from automation.schemas import FIELD_PATH_LIMIT, ClassifierDecision
from core.codes import Outcome
from core.history import AppendOnly


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


def run_rejected_by_approver(run: Any) -> bool:
    """A run an approver rejected (a person may correct its reading and have it decided
    again, as a new run)."""
    return run.state == State.FAILED and run.outcome == Outcome.APPROVAL_REJECTED


def run_is_replay(run: Any) -> bool:
    return run.replay_of_id is not None


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
        Outcome.SENT_BACK,  # an approver asked for the reading to be corrected
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


class Run(ConcurrentTransitionMixin, models.Model):
    """One inbound request's journey. State changes only through the transitions below.

    Optimistic locking on two counts: the FSM mixin refuses a save whose state changed since
    the row was read, and `version` refuses any stale writer (see _do_update).
    """

    # Intake's models by string reference: a run is opened by intake, which sits above the
    # run's record (pyproject.toml, automation-concerns); the foreign keys are the same.
    channel = models.ForeignKey(
        "automation.IntakeChannel", on_delete=models.PROTECT, related_name="runs"
    )
    event_id = models.CharField(max_length=200, blank=True)
    # Where the event id is unique: the channel's name for a JSON event, MAIL_SCOPE for an
    # e-mail (its Message-ID names one request on every path that takes mail). Set when the run
    # is made (a replay keeps its original's) and part of the effect key, so every run of one
    # request reaches one effect.
    identity_scope = models.CharField(max_length=100)
    # True once the event passed the contract: only then does it own (scope, event_id).
    claims_identity = models.BooleanField(default=False)
    intake = models.ForeignKey(
        "automation.IntakeRecord", on_delete=models.PROTECT, related_name="runs"
    )
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
    # What its classifier calls cost, summed over its attempts as each is written: the tokens
    # the model server reported and their price (GATEHOUSE_OPENAI_PRICES). The reports sum
    # these per hour received, route and classifier version (reports.rollups).
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    model_cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    # What a run at `enriched` waits for, when its classifier's server turned it away without
    # a call (a Wait of automation.classifiers.servers: "capacity" holds a slot of the rate
    # limit at next_attempt_at, "breaker" or "budget"); empty otherwise.
    waiting_for = models.CharField(max_length=20, blank=True, default="")
    # When a worker message for this run was sent and not yet spent: while it is out, the
    # sweep leaves the run alone (worker.dispatch.oldest_unspent says when it is lost).
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

    @transition(field=state, source=State.APPROVAL_REQUIRED, target=State.NEEDS_REVIEW)
    def send_back(self, *, reason: str) -> None:
        # An approver sent the request back: the reading waits for a person to correct it.
        self.outcome = Outcome.SENT_BACK
        self.failure_field = ""
        self.failure_detail = reason
        self._enter_queue(Outcome.SENT_BACK)
        self.next_attempt_at = None
        self.lease_expires_at = None

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

    @transition(
        field=state,
        source=State.FAILED,
        target=None,  # a new run carries the correction: this one stays as it ended
        conditions=[lambda run: run_rejected_by_approver(run)],
        permission="automation.correct_run",
        custom={
            "action": "correct_rejected",
            "label": "Correct and decide again",
            "help_text": "Fix the reading an approver rejected; a new run with your reading "
            "goes through policy again and asks for a fresh approval.",
        },
    )
    def correct_rejected(self) -> None:
        """A rejected run whose reading a person corrected, as a new run: it stays as it
        ended."""
        self._enter_queue("")

    @transition(
        field=state,
        source=State.ENRICHED,
        target=State.CLASSIFIED,
        conditions=[lambda run: run_is_replay(run)],
        permission="automation.correct_run",
        custom={"label": "Correct the reading"},  # not offered: a rejected run's correction
    )
    def correct_replay(self, *, decision: dict[str, Any]) -> None:
        """A replay's reading is a person's correction (of the run it replays), not a
        classifier's."""
        self._accept_reading(decision)

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


class Checkpoint(AppendOnly):
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
    SENT_BACK = "sent_back"  # an approver sent the request back for a correction
    DELIVERED = "delivered"
    ALREADY_DELIVERED = "already_delivered"  # a replay that reached a delivered effect
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"
    UNAVAILABLE = "unavailable"  # the delivery budget ran out
    UNWRITABLE = "unwritable"  # the local record cannot be written as it is
    NOT_SENT = "not_sent"  # refused before sending: what or where the settings do not allow


class StageRecord(AppendOnly):
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


class RunComment(AppendOnly):
    """What a person wrote on a run's thread, as written: part of the run's record, never
    edited. A comment changes no state, approval or decision; `mentions` names who it asks
    to read it ({"users": [ids], "groups": [names]}), for a notification to find later."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    body = models.TextField()
    mentions = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [
            # The run's thread, oldest first: WHERE run_id = ... ORDER BY created_at
            models.Index(fields=["run", "created_at"], name="run_comment_thread_idx"),
            # Who to tell: WHERE created_at >= ... among the comments that mention someone.
            models.Index(
                fields=["created_at"],
                condition=~models.Q(mentions={"users": [], "groups": []}),
                name="run_comment_mentions_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"comment by {self.author} on run {self.run_id}"
