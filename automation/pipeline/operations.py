"""What people (and the sweep) start by hand: re-decide, nudges; and the resume step."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django_fsm import can_proceed, has_transition_perm
from pydantic import ValidationError

from approvals import services as approvals
from approvals.models import ApprovalRequest, ApprovalStatus
from audit.models import AuditAction, AuditEvent
from audit.services import SYSTEM
from automation.conf import setting
from automation.effects.models import Effect, EffectStatus
from automation.pipeline.services import LOCAL_STEPS, STEPS
from automation.runs.journal import Stage, journal, record_audit, record_transition
from automation.runs.models import Run, StageName, StageOutcome, State
from automation.runs.payloads import policy_for
from automation.runs.runlog import log_run
from automation.runs.sending import ADVANCE_RUN_TASK, DELIVER_EFFECT_TASK, run_send
from automation.schemas import FieldProblem, decision_contract, validation_problems
from core.codes import Outcome
from core.errors import state_conflict
from core.limits import within
from worker.dispatch import MAX_DELAY, batch, enqueue_after_commit, oldest_unspent

# --- operator operations ----------------------------------------------------------------


def run_resume_in_transaction(*, run_id: int, actor_label: str, actor: User | None = None) -> str:
    """Continue from the latest checkpoint, revalidating what it holds before using it.

    In the caller's transaction, for a caller that has checked who asks: the one resume a
    person starts is `recovery.run_resume`.
    """
    run = Run.objects.select_for_update(of=("self",)).select_related("channel").get(pk=run_id)
    checkpoint = run.checkpoints.order_by("-sequence").first()
    stored = (checkpoint.data if checkpoint else {}).get("classification")
    if run.state not in (State.ENRICHED, State.NEEDS_REVIEW) or stored is None:
        return refuse_transition(run, "resume", actor, actor_label)
    stage = Stage(StageName.CLASSIFY, attempt=run.classify_attempts)
    try:
        # Held to the run's own catalogue version, as a classifier's answer is: a checkpoint
        # naming a type, route or effect the catalogue lacks is invalid, not policy's to catch.
        decision = decision_contract(policy_for(run).parsed.business).model_validate(stored)
    except ValidationError as exc:
        problems = validation_problems(exc)
        if run.state == State.NEEDS_REVIEW:
            return _refuse_checkpoint(run, actor, actor_label, problems)
        record_transition(
            run,
            run.hold,
            stage=stage,
            stage_outcome=StageOutcome.CLASSIFICATION_INVALID,
            actor=actor,
            outcome=Outcome.CLASSIFICATION_INVALID,
            field=problems[0].field,
            detail=json.dumps([p.model_dump() for p in problems]),
        )
        return Outcome.CLASSIFICATION_INVALID
    record_transition(
        run,
        run.resume,
        stage=stage,
        stage_outcome=StageOutcome.RESUMED,
        actor=actor,
        decision=decision.model_dump(mode="json"),
    )
    record_audit(
        run,
        AuditAction.RUN_RESUMED,
        actor=actor,
        actor_label=actor_label,
        from_state=State.ENRICHED,
        reason="checkpoint",
        checkpoint=checkpoint.sequence if checkpoint else None,
    )
    run_send(run)
    return run.state


def _refuse_checkpoint(
    run: Run, actor: User | None, actor_label: str, problems: list[FieldProblem]
) -> str:
    """A held run whose checkpoint does not fit its catalogue stays held as it was; the refusal
    and its reasons are on the record."""
    return refuse_transition(
        run,
        "resume",
        actor,
        actor_label,
        outcome=Outcome.CLASSIFICATION_INVALID,
        problems=[p.model_dump() for p in problems],
    )


# The steps before a reading: a new run taken through them stops where it is to be read.
BEFORE_READING = (State.RECEIVED, State.VALIDATED, State.NORMALIZED)


def run_prepare_in_transaction(*, run: Run, now: datetime) -> None:
    """Take a new run (locked, at `received`) through validate, normalize and enrich in the
    caller's transaction, as the pipeline would, and stop at `enriched`, before any reading:
    for a replay whose reading is a person's, not a classifier's."""
    # A run at `received` has no checkpoint yet: the steps' rows are numbered from one.
    with journal(run, last_sequence=0):
        while run.state in BEFORE_READING:
            LOCAL_STEPS[run.state](run, now)
        run.save()


RECOVER_RUN = "automation.recover_run"


def run_reconsider(*, run_id: int, user: User, reason: str) -> str:
    """Decide a waiting run again under the policy active now; its approval goes stale."""
    # Before the run is read: whoever may not re-decide learns nothing about it and leaves
    # nothing on its record (not even a refused transition).
    if not user.has_perm(RECOVER_RUN):
        raise PermissionDenied("you may not re-decide runs")
    within(reason, what="the reason")
    with transaction.atomic(durable=True):
        result = _reconsider(run_id, user, reason)
    if result == Outcome.STATE_CONFLICT:
        raise state_conflict("re-deciding")  # recorded and committed first
    return result


def _reconsider(run_id: int, user: User, reason: str) -> str:
    run = Run.objects.select_for_update().get(pk=run_id)
    if not can_proceed(run.reconsider):
        return refuse_transition(run, "reconsider", user, SYSTEM, reason=reason)
    if not has_transition_perm(run.reconsider, user):
        raise PermissionDenied("you may not re-decide runs")
    now = timezone.now()
    open_requests = run.approvals.filter(
        status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED], consumed_at__isnull=True
    )
    for request in open_requests:
        approvals.approval_invalidate(request=request, refusal=Outcome.APPROVAL_STALE, now=now)
    record_transition(run, run.reconsider, actor=user, note={"reason": reason})
    run_send(run)
    return run.state


def refuse_transition(
    run: Run,
    what: str,
    actor: User | None,
    actor_label: str,
    *,
    outcome: Outcome = Outcome.STATE_CONFLICT,
    **data: Any,
) -> str:
    """Record a refused transition (by default: not from this state); the run itself is left
    exactly as it was. Returns the refusal's outcome code."""
    record_audit(
        run,
        AuditAction.TRANSITION_REFUSED,
        actor=actor,
        actor_label=actor_label,
        from_state=run.state,
        outcome=outcome,
        requested=what,
        **data,
    )
    log_run(run, f"run {run.pk}: {what} refused in state {run.state}", requested=what)
    return outcome


# --- the sweep ---------------------------------------------------------------------------

# States whose runs the sweep nudges when no message will move them. Not `executing`: its
# effect is swept on its own. Not `approval_required`: a decision sends its own message.
SWEPT_STATES = sorted(STEPS - {State.EXECUTING, State.APPROVAL_REQUIRED})


def message_lost_before(now: datetime) -> datetime:
    """A message sent before this time and not spent is lost (its worker died, say).

    It must be older than the task timeout allows a task to run, and older than the oldest
    message not yet spent (waiting, or taken and not acknowledged): queues are served oldest
    first, so a message sent before that one has been spent. During a backlog, work that is
    queued or in a worker's hands is never sent twice.
    """
    lost = now - timedelta(seconds=setting("STAGE_LEASE_SECONDS"))
    unspent = oldest_unspent()
    if unspent is not None:
        lost = min(lost, unspent - timedelta(seconds=1))
    return lost


def sweep_due(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """Find work that no message will move (a lost message, a retry come due) and nudge it.

    A safety net, not the engine: a run or effect whose message is still waiting, or that a
    worker holds under a lease, is left alone. Each pass reads at most `limit` rows of each
    kind, whatever the backlog.
    """
    now = now or timezone.now()
    stale = now - timedelta(seconds=setting("STAGE_LEASE_SECONDS"))
    lost = message_lost_before(now)
    no_message = Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=lost)
    due_runs = list(
        Run.objects.filter(state__in=SWEPT_STATES)
        .exclude(lease_expires_at__gt=now)  # a worker is calling the classifier for it
        .exclude(next_attempt_at__gt=now)  # waiting for its backoff
        .filter(no_message)
        # Stalled: unmoved for a lease's length, or a classifier retry come due.
        .filter(Q(updated_at__lte=stale) | Q(next_attempt_at__lte=now))
        .values_list("pk", flat=True)[:limit]
    )
    # A decision committed but its message was lost (a worker restarted): the request is
    # closed more recently than the run last moved, and long enough ago to be lost.
    decided = ApprovalRequest.objects.filter(
        run=OuterRef("pk"),
        status__in=[
            ApprovalStatus.APPROVED,
            ApprovalStatus.REJECTED,
            ApprovalStatus.EXPIRED,
            ApprovalStatus.SENT_BACK,
        ],
        decided_at__gte=OuterRef("updated_at"),
        decided_at__lt=lost,
    )
    decided_runs = list(
        Run.objects.filter(state=State.APPROVAL_REQUIRED)
        .filter(Exists(decided))
        .values_list("pk", flat=True)[:limit]
    )
    # Effects: a retry due before the next sweep comes by (sent as a delayed message, taken
    # when its backoff runs out: a wait longer than a message is delayed by was sent by
    # nobody), a lease run out (the worker died mid-attempt), or a new row whose message was
    # lost. Held effects (no next attempt, no lease) stay put.
    effects = list(
        Effect.objects.filter(status__in=[EffectStatus.PENDING, EffectStatus.RETRY_WAIT])
        .filter(
            Q(next_attempt_at__lte=now + MAX_DELAY)
            | Q(lease_expires_at__lte=now)
            | Q(status=EffectStatus.PENDING, lease_expires_at__isnull=True, created_at__lte=stale)
        )
        .exclude(lease_expires_at__gt=now)
        .filter(no_message)
        .values_list("pk", "next_attempt_at")[:limit]
    )
    with transaction.atomic(durable=True), batch():
        Run.objects.filter(pk__in=due_runs).update(dispatched_at=now)
        Effect.objects.filter(pk__in=[pk for pk, _ in effects]).update(dispatched_at=now)
        for run_id in [*due_runs, *decided_runs]:
            enqueue_after_commit(ADVANCE_RUN_TASK, run_id)
        for effect_id, due in effects:
            later = due if due is not None and due > now else None
            enqueue_after_commit(DELIVER_EFFECT_TASK, effect_id, not_before=later)
        if due_runs or decided_runs:
            AuditEvent.objects.bulk_create(
                AuditEvent(run_id=run_id, action=AuditAction.SWEEP_NUDGED, actor_label=SYSTEM)
                for run_id in [*due_runs, *decided_runs]
            )
    approvals_done = approvals.approvals_sweep(now=now, limit=limit)
    return {"runs": len(due_runs) + len(decided_runs), "effects": len(effects), **approvals_done}
