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

from django.conf import settings
from django.db import models

from core.history import AppendOnly


class AuditAction(models.TextChoices):
    """Every action the trail records. The values are stored and reports filter on them: a
    value never changes, a new action gets a new member."""

    # A run's transitions: "run." and the name of the transition method on automation's Run
    # (automation.runs.journal checks, when it loads, that each one has its member).
    RUN_VALIDATE = "run.validate"
    RUN_NORMALIZE = "run.normalize"
    RUN_ENRICH = "run.enrich"
    RUN_SCHEDULE_CLASSIFIER_RETRY = "run.schedule_classifier_retry"
    RUN_CLASSIFY = "run.classify"
    RUN_REQUIRE_APPROVAL = "run.require_approval"
    RUN_APPROVE = "run.approve"
    RUN_RECONSIDER = "run.reconsider"
    RUN_INVALIDATE_APPROVAL = "run.invalidate_approval"
    RUN_REFUSE_APPROVAL = "run.refuse_approval"
    RUN_EXECUTE = "run.execute"
    RUN_EXECUTE_APPROVED = "run.execute_approved"
    RUN_RETRY_EFFECT = "run.retry_effect"
    RUN_COMPLETE = "run.complete"
    RUN_BLOCK = "run.block"
    RUN_HOLD = "run.hold"
    RUN_FAIL = "run.fail"
    RUN_RETRY_STAGE = "run.retry_stage"
    RUN_RESOLVE_BY_HAND = "run.resolve_by_hand"
    RUN_ABANDON = "run.abandon"
    RUN_CLOSE_EXCEPTION = "run.close_exception"
    RUN_CORRECT_READING = "run.correct_reading"
    RUN_RESUME = "run.resume"
    RUN_REPLAY = "run.replay"
    RUN_SEND_BACK = "run.send_back"
    RUN_CORRECT_REJECTED = "run.correct_rejected"
    RUN_CORRECT_REPLAY = "run.correct_replay"
    # What else happens to a run.
    RUN_RECEIVED = "run.received"
    RUN_THREAD_LINKED = "run.thread_linked"
    RUN_RESUMED = "run.resumed"
    RUN_REPLAYED = "run.replayed"
    RUN_REPLAY_STARTED = "run.replay_started"
    # A run a recovery batch worked, on the trail of the person who prepared the batch when
    # someone else started it (the items are the starter's): both acted on the run.
    RUN_BATCH_PREPARED = "run.batch_prepared"
    RUN_NUDGED = "run.nudged"
    SWEEP_NUDGED = "sweep.nudged"
    RUN_WAITING = "run.waiting"  # its classifier's server turned it away without a call
    RUN_COMMENTED = "run.commented"  # a person wrote on the run's thread (NOT_A_HAND)
    TRANSITION_REFUSED = "transition.refused"
    CHECKPOINT_IMPORTED = "checkpoint.imported"
    # Intake answers that make no run of their own.
    INTAKE_IDEMPOTENT_REPLAY = "intake.idempotent_replay"
    INTAKE_IDEMPOTENCY_CONFLICT = "intake.idempotency_conflict"
    # Effects.
    QA_SAMPLED = "qa.sampled"
    QA_CONFIRMED = "qa.confirmed"
    QA_CORRECTED = "qa.corrected"
    QA_RECONCILED = "qa.reconciled"
    EFFECT_ADOPTED = "effect.adopted"
    EFFECT_PAUSED = "effect.paused"
    EFFECT_RESUMED = "effect.resumed"
    # Approvals: every value starts with APPROVAL_ACTIONS (a decision is not a hand on the run).
    APPROVAL_APPROVE = "approval.approve"
    APPROVAL_REJECT = "approval.reject"
    APPROVAL_SENT_BACK = "approval.sent_back"  # closed for a correction of its run's reading
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_ESCALATED = "approval.escalated"
    APPROVAL_CLAIMED = "approval.claimed"
    APPROVAL_ASSIGNED = "approval.assigned"
    APPROVAL_RELEASED = "approval.released"
    DELEGATION_GIVEN = "delegation.given"
    DELEGATION_ENDED = "delegation.ended"
    # A record effect's task, worked by its team (automation.effects.task_work).
    TASK_CLAIMED = "task.claimed"
    TASK_RELEASED = "task.released"
    TASK_DONE = "task.done"
    TASK_COMMENTED = "task.commented"
    # A person marked their notifications read in the console.
    NOTIFICATIONS_READ = "notifications.read"
    # Policy and configuration.
    POLICY_ACTIVATED = "policy.activated"
    API_TOKEN_ISSUED = "api_token.issued"  # noqa: S105 - an action name, not a secret
    API_TOKEN_REVOKED = "api_token.revoked"  # noqa: S105 - an action name, not a secret
    CHANNEL_CLASSIFIER_CHANGED = "channel.classifier_changed"
    CHANNEL_CREATED = "channel.created"
    CHANNEL_CHANGED = "channel.changed"
    MAILBOX_SET = "mailbox.set"
    CLASSIFIER_PROMOTED = "classifier.promoted"
    CLASSIFIER_ROLLED_BACK = "classifier.rolled_back"
    CLASSIFIER_TRAINED = "classifier.trained"
    CLASSIFIER_SHADOW_ADDED = "classifier.shadow_added"
    LABELLED_SET_UPLOADED = "labelled_set.uploaded"
    LABELLED_SET_REFUSED = "labelled_set.refused"
    LABELLED_SET_REMOVED = "labelled_set.removed"
    LABELLED_SET_EVALUATED = "labelled_set.evaluated"
    CUSTOMERS_LOADED = "customers.loaded"
    CUSTOMER_ADDED = "customer.added"
    CUSTOMER_CHANGED = "customer.changed"
    # Accounts: a company sign-in set a person's groups from the identity provider's claim.
    ACCOUNT_ROLES_FOLLOWED_PROVIDER = "account.roles_followed_provider"
    # Teams and people, changed in the console by an administrator.
    TEAM_CREATED = "team.created"
    TEAM_CHANGED = "team.changed"  # its roles or its description
    TEAM_MEMBER_ADDED = "team.member_added"
    TEAM_MEMBER_REMOVED = "team.member_removed"
    TEAM_PROVIDER_GROUPS_CHANGED = "team.provider_groups_changed"
    PERSON_ADDED = "person.added"
    PERSON_CHANGED = "person.changed"
    PERSON_DEACTIVATED = "person.deactivated"


# The prefix of every approval action: rows about approvals are shown only to those who see
# every group's requests, and are left out of the hand-action index below.
APPROVAL_ACTIONS = "approval."
# A person's row about a run that is not acting on it: a comment says something and changes
# nothing, so it never keeps its author from approving the run (separation of duties), and
# is left out of the hand-action index below like a decision.
NOT_A_HAND = AuditAction.RUN_COMMENTED.value


class AuditEvent(AppendOnly):
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
        db_index=False,  # audit_approval_idx
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        db_index=False,  # audit_actor_idx
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
            # An approval's trail and a person's actions (WHERE approval_id = ..., WHERE
            # actor_id = ...): most rows are the system's about a run, so each index holds
            # only the rows that have one, and a step's audit row writes neither.
            models.Index(
                fields=["approval"],
                condition=models.Q(approval__isnull=False),
                name="audit_approval_idx",
            ),
            models.Index(
                fields=["actor"], condition=models.Q(actor__isnull=False), name="audit_actor_idx"
            ),
            # Reports and the run page: WHERE action = ... / WHERE run_id = ... ORDER BY created_at
            models.Index(fields=["action", "created_at"], name="audit_action_idx"),
            # Separation of duties: the runs a person acted on by hand (every action but a
            # decision on an approval, APPROVAL_ACTIONS, and a comment, NOT_A_HAND). An
            # approver's own decisions can be most of their rows; this index holds the rest.
            models.Index(
                fields=["actor", "run"],
                condition=models.Q(actor__isnull=False, run__isnull=False)
                & ~models.Q(action__startswith=APPROVAL_ACTIONS)
                & ~models.Q(action=NOT_A_HAND),
                name="audit_hand_action_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label}"
