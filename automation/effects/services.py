"""The outbox: deliver each effect under its idempotency key, retrying without ever doubling.

Local effects are written and completed in one transaction. Remote (HTTP) effects go in
three steps: claim the row with a lease (a transaction), call the receiver (no transaction,
no lock held), record what came back (a transaction that re-checks the claim). A worker that
dies between the call and the record leaves the lease to run out; the sweep then delivers
again with the same key, and the receiver's deduplication makes it count once.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import (
    DataError,
    IntegrityError,
    NotSupportedError,
    ProgrammingError,
    connection,
    transaction,
)
from django.db.models import Q
from django.utils import timezone
from django_fsm import can_proceed, has_transition_perm

from approvals.models import ApprovalRequest, ApprovalStatus
from audit.models import AuditAction
from automation.conf import setting
from automation.effects.adapters import effect_adapter
from automation.effects.base import Delivery, EffectAdapter
from automation.effects.models import (
    WAITING,
    DeliveryResult,
    Effect,
    EffectAttempt,
    EffectControl,
    EffectStatus,
)
from automation.runs.backoff import retry_delay
from automation.runs.journal import Stage, record_audit, record_transition, write_row
from automation.runs.locking import lock_run
from automation.runs.models import Run, StageName, StageOutcome, State
from automation.runs.payloads import binding_of
from automation.runs.runlog import log_run
from automation.runs.sending import DELIVER_EFFECT_TASK
from automation.schemas import storable
from automation.signals import effect_sent_downstream
from core.codes import Outcome, Refusal
from core.errors import ServiceError
from policy.models import PolicyVersion
from worker.dispatch import MAX_DELAY, Priority, batch, enqueue_after_commit

DELIVERABLE = WAITING
# Errors no retry cures: the local record cannot be written as it is (a value longer than its
# column, text the database cannot hold or encode, a constraint it breaks, a table that is not
# as the code expects). Transient errors (OperationalError: a lost connection, a deadlock) are
# not among them: they roll the delivery back and the sweep tries again.
UNWRITABLE = (DataError, IntegrityError, ProgrammingError, NotSupportedError, UnicodeEncodeError)
# Attempt results logged at INFO; any other is a WARNING.
QUIET_RESULTS = (DeliveryResult.DELIVERED, DeliveryResult.RETRY)
# While an effect is paused, due deliveries look again this often, without using an attempt.
PAUSE_RECHECK = timedelta(seconds=30)


def effect_budget(adapter: EffectAdapter, now: datetime) -> tuple[int, datetime]:
    """The attempts and the deadline a delivery gets, from the effect's configuration."""
    return adapter.max_attempts, now + timedelta(seconds=adapter.deadline_seconds)


def adapter_of(effect: Effect) -> EffectAdapter:
    """The adapter of the catalogue that authorised the effect."""
    return effect_adapter(effect.name, effect.authorization["policy_version"])


def effect_deliver(*, effect_id: int, now: datetime | None = None) -> str | None:
    """Deliver one outbox row if it is due. Returns the effect's status, or None if idle."""
    now = now or timezone.now()
    found = (
        Effect.objects.filter(pk=effect_id)
        .values_list("name", "authorization__policy_version")
        .first()
    )
    if found is None:
        return None
    adapter = effect_adapter(*found)
    if adapter.local:
        return _deliver_local(effect_id, adapter, now)
    claim = _claim(effect_id, adapter, now)
    if claim is None:
        return None
    effect, started_at = claim
    clock = time.monotonic()
    delivery = adapter.deliver(effect)
    effect_sent_downstream.send(sender=Effect, effect_id=effect.pk)
    elapsed_ms = int((time.monotonic() - clock) * 1000)
    return _record(effect.pk, effect.attempts, adapter, delivery, started_at, elapsed_ms, now)


def _lock_deliverable(effect_id: int) -> Effect | None:
    # SKIP LOCKED: a duplicated message for a row being claimed right now does nothing.
    skip = connection.features.has_select_for_update_skip_locked
    return (
        Effect.objects.select_for_update(skip_locked=skip)
        .filter(pk=effect_id, status__in=DELIVERABLE)
        .first()
    )


def _deliver_local(effect_id: int, adapter: EffectAdapter, now: datetime) -> str | None:
    with transaction.atomic(durable=True):
        effect = _lock_deliverable(effect_id)
        if effect is None:
            return None
        run = lock_run(effect.run_id, wait=True)  # we hold the effect: finish the delivery
        if run is None or run.state != State.EXECUTING:
            return None
        effect_deliver_locked(effect=effect, run=run, adapter=adapter, now=now)
        run.save()
        return effect.status


def effect_deliver_locked(
    *, effect: Effect, run: Run, adapter: EffectAdapter, now: datetime
) -> bool:
    """Perform a local effect on rows the caller has locked, and complete the run.

    The adapter writes its record under the effect's key in this same transaction, so the
    effect, its attempt and the run's completion commit together or not at all. A record
    that cannot be written holds the run instead (see _hold_unwritable). The caller saves the
    run. Returns True (the run moved).
    """
    effect.attempts += 1
    effect.dispatched_at = None
    try:
        # A savepoint: a failed write leaves the caller's transaction usable, to hold the run.
        with transaction.atomic():
            delivery = adapter.deliver(effect)
    except UNWRITABLE as exc:
        _hold_unwritable(effect, run, exc, now)
        return True
    attempt = EffectAttempt(
        effect=effect,
        attempt=effect.attempts,
        started_at=now,
        duration_ms=0,
        outcome=delivery.outcome,
        detail=delivery.reference,
    )
    write_row(run, attempt)
    _log_attempt(run, effect, attempt)
    _delivered(effect, run, delivery, now, save_run=False)
    return True


def _hold_unwritable(effect: Effect, run: Run, error: Exception, now: datetime) -> None:
    """Hold the run for a person, naming the database's reason. The effect keeps its key and
    waits with no next attempt, so neither the sweep nor a resume sends it again: retrying
    alone would fail the same way. Staff retry it once the value or the column is fixed, or
    resolve the run by hand."""
    # The first line: PostgreSQL goes on to quote the statement and the values in it.
    reason = storable(f"{type(error).__name__}: {next(iter(str(error).splitlines()), '')}")
    attempt = EffectAttempt.objects.create(
        effect=effect,
        attempt=effect.attempts,
        started_at=now,
        duration_ms=0,
        outcome=DeliveryResult.REJECTED,
        error_class=type(error).__name__,
        detail=reason,
    )
    _log_attempt(run, effect, attempt)
    effect.wait(next_attempt_at=None, last_error=reason)
    effect.lease_expires_at = None
    effect.save()
    _hold_unavailable(
        effect,
        run,
        StageOutcome.UNWRITABLE,
        f"the {effect.name} record could not be written ({reason}); retrying fails "
        "the same way until the value or the column is fixed",
        save=False,
    )


def effect_send(*, effect: Effect, now: datetime, priority: Priority = Priority.LIVE) -> None:
    """Send a remote effect's delivery to the workers, unless a message for it is out."""
    if effect.dispatched_at is not None or _not_due(effect, now):
        return
    effect.dispatched_at = now
    effect.save(update_fields=["dispatched_at"])
    enqueue_after_commit(DELIVER_EFFECT_TASK, effect.pk, priority=priority)


def _claim(effect_id: int, adapter: EffectAdapter, now: datetime) -> tuple[Effect, datetime] | None:
    """Take a lease on one due effect and count the attempt; None if it is not ours to send."""
    with transaction.atomic(durable=True):
        effect = _lock_deliverable(effect_id)
        if effect is None or _not_due(effect, now):
            return None
        run = lock_run(effect.run_id, wait=True)
        if run is None or run.state != State.EXECUTING:
            return None
        if _note_lost_attempt(effect, run, now) and not adapter.honours_idempotency_keys:
            # The lost attempt may have been performed and this receiver cannot tell a repeat.
            lost = Delivery(DeliveryResult.UNCERTAIN, error_class="WorkerLost")
            _apply(effect, run, adapter, lost, now)
            return None
        if effect.attempts >= effect.attempt_limit or (
            effect.deadline_at is not None and now > effect.deadline_at
        ):
            # The budget ran out while the effect waited (a pause, a lost attempt).
            _retry_or_hold(
                effect,
                run,
                Delivery(DeliveryResult.RETRY, error_class="BudgetSpent"),
                now,
                Stage(StageName.EXECUTE, effect.attempts),
            )
            return None
        wait = _held_back(effect, now)
        if wait is not None:
            effect.next_attempt_at = now + wait
            _send_when_due(effect, now)
            effect.save(update_fields=["next_attempt_at", "dispatched_at"])
            return None
        effect.attempts += 1
        effect.next_attempt_at = None
        effect.dispatched_at = None  # the message is spent: the lease now guards the attempt
        effect.lease_expires_at = now + timedelta(seconds=setting("EFFECT_LEASE_SECONDS"))
        effect.save(
            update_fields=["attempts", "next_attempt_at", "dispatched_at", "lease_expires_at"]
        )
        return effect, now


def _send_when_due(effect: Effect, now: datetime) -> None:
    """Send the message of the effect's next attempt now, to be taken when it is due: the
    backoff sets the pace, not the sweep. A longer wait than a message is delayed by
    (MAX_DELAY) is left to the sweep, which sends it once it comes that near. The caller
    saves the effect (its `dispatched_at` says whether a message is out)."""
    due = effect.next_attempt_at
    if due is None or due - now > MAX_DELAY:
        effect.dispatched_at = None
        return
    effect.dispatched_at = now
    enqueue_after_commit(
        DELIVER_EFFECT_TASK, effect.pk, priority=effect_priority(effect), not_before=due
    )


def effect_priority(effect: Effect) -> Priority:
    """The queue of an effect's deliveries: an approved effect is what an approver (and the
    requester) now waits for."""
    return Priority.URGENT if effect.authorization.get("approval_request") else Priority.LIVE


def _not_due(effect: Effect, now: datetime) -> bool:
    if effect.lease_expires_at is not None and effect.lease_expires_at > now:
        return True  # another worker is delivering it right now
    return effect.next_attempt_at is not None and effect.next_attempt_at > now


def _note_lost_attempt(effect: Effect, run: Run, now: datetime) -> bool:
    """An attempt whose worker died before recording it still counts, and shows."""
    recorded = effect.attempt_rows.count()
    if effect.attempts <= recorded:
        return False
    lease = timedelta(seconds=setting("EFFECT_LEASE_SECONDS"))
    lost = EffectAttempt.objects.create(
        effect=effect,
        attempt=effect.attempts,
        # The claim took the lease at the start of the attempt.
        started_at=(effect.lease_expires_at - lease) if effect.lease_expires_at else now,
        duration_ms=0,
        outcome=DeliveryResult.LOST,
        error_class="WorkerLost",
        detail="the worker stopped before it recorded this attempt; its lease ran out",
    )
    _log_attempt(run, effect, lost)
    return True


def _held_back(effect: Effect, now: datetime) -> timedelta | None:
    """Paused, or over the delivery rate after a resume: how long to wait, without an attempt."""
    # Locking the control row makes claims of one effect take turns, so each one counts the
    # leases the others just took: the rate holds with many workers.
    control = EffectControl.objects.select_for_update().filter(name=effect.name).first()
    if control is None:
        return None
    if control.paused:
        return PAUSE_RECHECK
    if control.rate_per_minute:
        finished = EffectAttempt.objects.filter(
            effect__name=effect.name, started_at__gt=now - timedelta(minutes=1)
        ).count()
        in_flight = Effect.objects.filter(name=effect.name, lease_expires_at__gt=now).count()
        if finished + in_flight >= control.rate_per_minute:
            return timedelta(seconds=60 / control.rate_per_minute)
    return None


def _record(
    effect_id: int,
    attempt: int,
    adapter: EffectAdapter,
    delivery: Delivery,
    started_at: datetime,
    elapsed_ms: int,
    now: datetime,
) -> str | None:
    with transaction.atomic(durable=True):
        effect = Effect.objects.select_for_update().get(pk=effect_id)
        if effect.status not in DELIVERABLE or effect.attempts != attempt:
            return None  # our lease ran out and another worker took the effect over
        run = lock_run(effect.run_id, wait=True)
        if run is None or run.state != State.EXECUTING:
            return None
        row = EffectAttempt.objects.create(
            effect=effect,
            attempt=attempt,
            started_at=started_at,
            duration_ms=elapsed_ms,
            outcome=delivery.outcome,
            status_code=delivery.status_code,
            error_class=delivery.error_class,
            detail=delivery.detail or delivery.body[:500],
        )
        _log_attempt(run, effect, row)
        effect.lease_expires_at = None
        effect.response_status = delivery.status_code
        effect.response_body = delivery.body
        effect.last_error = delivery.error_class or (
            "" if delivery.outcome == DeliveryResult.DELIVERED else f"HTTP {delivery.status_code}"
        )
        # The execute stage took the call's time, not the moment of recording its answer.
        stage = Stage(StageName.EXECUTE, attempt, started_at=started_at, duration_ms=elapsed_ms)
        _apply(effect, run, adapter, delivery, now, stage=stage)
        return effect.status


def _log_attempt(run: Run, effect: Effect, attempt: EffectAttempt) -> None:
    """One line per delivery attempt: the result, never the payload or the receiver's body."""
    log_run(
        run,
        f"effect {effect.name} attempt {attempt.attempt}: {attempt.outcome}",
        level=logging.INFO if attempt.outcome in QUIET_RESULTS else logging.WARNING,
        effect_id=effect.pk,
        effect=effect.name,
        attempt=attempt.attempt,
        result=attempt.outcome,
        status_code=attempt.status_code,
        error_class=attempt.error_class,
        duration_ms=attempt.duration_ms,
    )


def _apply(
    effect: Effect,
    run: Run,
    adapter: EffectAdapter,
    delivery: Delivery,
    now: datetime,
    *,
    stage: Stage | None = None,
) -> None:
    """What a delivery's answer does to the effect and the run. `stage` is the execute stage
    as it was timed (a remote delivery's call); else it is timed from here."""
    stage = stage or Stage(StageName.EXECUTE, effect.attempts)
    outcome = delivery.outcome
    if outcome == DeliveryResult.UNCERTAIN and adapter.honours_idempotency_keys:
        outcome = DeliveryResult.RETRY  # the receiver deduplicates by key: sending again is safe
    if outcome == DeliveryResult.DELIVERED:
        _delivered(effect, run, delivery, now, stage=stage)
    elif outcome == DeliveryResult.NOT_SENT:
        _hold_not_sent(effect, run, delivery, stage)
    elif outcome == DeliveryResult.REJECTED:
        effect.reject()
        effect.save()
        record_transition(
            run,
            run.fail,
            stage=stage,
            stage_outcome=StageOutcome.REJECTED,
            checkpoint={"effect": effect.pk, "response_status": delivery.status_code},
            outcome=Outcome.EFFECT_REJECTED,
            field=effect.name,
            # Not the receiver's answer: the run's reason is read by everyone who reads the
            # run (auditors too); the answer is kept with the effect for those who handle
            # deliveries (automation.effects.selectors.sees_effect_answers).
            detail=f"HTTP {delivery.status_code}: the receiver refused the effect",
            finished_at=now,
        )
    elif outcome == DeliveryResult.UNCERTAIN:
        effect.lose_track()
        effect.save()
        record_transition(
            run,
            run.hold,
            stage=stage,
            stage_outcome=StageOutcome.UNCERTAIN,
            outcome=Outcome.EFFECT_UNCERTAIN,
            field=effect.name,
            detail=f"{delivery.error_class}: sent, no answer; reconcile with the receiver",
        )
    else:
        _retry_or_hold(effect, run, delivery, now, stage)


def _hold_not_sent(effect: Effect, run: Run, delivery: Delivery, stage: Stage) -> None:
    """Hold the run for a person: Gatehouse refused to send the effect as it stands (a secret,
    an address or a header the settings do not allow). Nothing left, so it is no uncertain
    delivery; the effect keeps its key and waits with no next attempt, since sending again
    is refused the same way. Staff retry it once the settings or the catalogue allow it."""
    effect.wait(next_attempt_at=None, last_error=f"{delivery.error_class}: {delivery.detail}")
    effect.save()
    _hold_unavailable(
        effect,
        run,
        StageOutcome.NOT_SENT,
        f"not sent: {delivery.detail}",
        stage=stage,
    )


def _retry_or_hold(
    effect: Effect, run: Run, delivery: Delivery, now: datetime, stage: Stage
) -> None:
    delay = max(retry_delay(effect.attempts), delivery.retry_after or 0.0)
    next_at = now + timedelta(seconds=delay)
    spent = effect.attempts >= effect.attempt_limit
    late = effect.deadline_at is not None and next_at > effect.deadline_at
    effect.wait(next_attempt_at=None if spent or late else next_at)
    _send_when_due(effect, now)
    effect.save()
    if effect.next_attempt_at is not None:
        stage.record(run, StageOutcome.RETRY_SCHEDULED, delivery.error_class)
        return
    reason = "attempt limit reached" if spent else "deadline passed"
    tries = f"{effect.attempts} attempt{'' if effect.attempts == 1 else 's'}"
    last = delivery.error_class or f"HTTP {delivery.status_code}"
    detail = f"{reason} after {tries}; last: {last}"
    unknown = _first_unknown_attempt(effect)
    if unknown is not None:
        _hold_uncertain(effect, run, unknown, detail, stage=stage)
        return
    _hold_unavailable(effect, run, StageOutcome.UNAVAILABLE, detail, stage=stage)


def _first_unknown_attempt(effect: Effect) -> EffectAttempt | None:
    """The first attempt that may have been performed: sent with no answer, or lost with its
    worker. Later answers (a 503 to a retry) say nothing about it."""
    unknown = [DeliveryResult.UNCERTAIN, DeliveryResult.LOST]
    return effect.attempt_rows.filter(outcome__in=unknown).order_by("attempt").first()


def _hold_uncertain(
    effect: Effect, run: Run, unknown: EffectAttempt, detail: str, *, stage: Stage
) -> None:
    """Hold the run as uncertain: once an attempt may have been performed, the effect is
    not known to be undone, whatever later attempts answered, so "could not be reached"
    would invite a person to abandon an effect that was done."""
    why = "sent, no answer" if unknown.outcome == DeliveryResult.UNCERTAIN else "worker lost"
    record_transition(
        run,
        run.hold,
        stage=stage,
        stage_outcome=StageOutcome.UNCERTAIN,
        outcome=Outcome.EFFECT_UNCERTAIN,
        field=effect.name,
        detail=(
            f"attempt {unknown.attempt} may have been performed "
            f"({unknown.error_class or unknown.outcome}: {why}); {detail}; "
            "reconcile with the receiver"
        ),
    )


def _hold_unavailable(
    effect: Effect,
    run: Run,
    stage_outcome: StageOutcome,
    detail: str,
    *,
    save: bool = True,
    stage: Stage | None = None,
) -> None:
    """Hold the run for a person: the effect cannot be delivered as things stand."""
    record_transition(
        run,
        run.hold,
        stage=stage or Stage(StageName.EXECUTE, effect.attempts),
        stage_outcome=stage_outcome,
        outcome=Outcome.EFFECT_UNAVAILABLE,
        field=effect.name,
        detail=detail,
        save=save,
    )


def _delivered(
    effect: Effect,
    run: Run,
    delivery: Delivery,
    now: datetime,
    *,
    save_run: bool = True,
    stage: Stage | None = None,
) -> None:
    effect.deliver(reference=delivery.reference, now=now)
    effect.save()
    (stage or Stage(StageName.EXECUTE, effect.attempts)).record(run, StageOutcome.DELIVERED)
    record_transition(
        run,
        run.complete,
        stage=Stage(StageName.COMPLETE),
        checkpoint={"effect": effect.pk, "response_ref": effect.response_ref},
        finished_at=now,
        save=save_run,
    )


# --- people: retry a held effect, pause and resume ----------------------------------------


def effect_retry_in_transaction(
    *, run_id: int, user: User, reason: str, now: datetime | None = None
) -> str:
    """Deliver a held run's effect again: same key, a fresh attempt budget and deadline.

    In the caller's transaction, for `recovery._retry`, which has checked the person's right
    to recover runs and records the RecoveryAction.
    """
    now = now or timezone.now()
    run = Run.objects.select_for_update().get(pk=run_id)
    if not can_proceed(run.retry_effect):
        record_audit(
            run,
            AuditAction.TRANSITION_REFUSED,
            actor=user,
            from_state=run.state,
            outcome=Outcome.STATE_CONFLICT,
            requested="retry_effect",
            reason=reason,
        )
        return Outcome.STATE_CONFLICT
    if not has_transition_perm(run.retry_effect, user):
        raise PermissionDenied("you may not retry effects")
    effect = Effect.objects.select_for_update().get(run=run, name=run.effect_name)
    attempts, deadline_at = effect_budget(adapter_of(effect), now)
    effect.send_again(attempts=attempts, deadline_at=deadline_at, now=now)
    effect.dispatched_at = now
    effect.save()
    record_transition(
        run, run.retry_effect, actor=user, note={"reason": reason, "effect": effect.pk}
    )
    # A person asked for it: ahead of any backlog.
    enqueue_after_commit(DELIVER_EFFECT_TASK, effect.pk, priority=Priority.URGENT)
    return run.state


def _may_control(user: User) -> None:
    if not user.has_perm("automation.change_effectcontrol"):
        raise PermissionDenied("you may not pause or resume effects")


# A pause or resume that would change nothing is refused (Refusal.ALREADY_PAUSED,
# NOT_PAUSED), so the trail records only changes.
@transaction.atomic(durable=True)
def effect_pause(*, name: str, user: User) -> EffectControl:
    """Hold every delivery of this effect: due ones wait instead of using up attempts."""
    _may_control(user)
    control, _ = EffectControl.objects.select_for_update().get_or_create(name=name)
    if control.paused:
        raise ServiceError(
            Refusal.ALREADY_PAUSED,
            "this effect is already paused: nothing was changed",
        )
    control.paused = True
    control.changed_by = user
    control.save()
    record_audit(None, AuditAction.EFFECT_PAUSED, actor=user, effect=name)
    return control


@transaction.atomic(durable=True)
def effect_resume(*, name: str, user: User, rate_per_minute: int | None) -> EffectControl:
    """Let deliveries go again, at most `rate_per_minute` so the receiver can recover. Only a
    paused effect resumes: to change the rate of a running one, pause it first."""
    _may_control(user)
    control = EffectControl.objects.select_for_update().filter(name=name).first()
    if control is None or not control.paused:
        raise ServiceError(Refusal.NOT_PAUSED, _not_paused(control))
    control.paused = False
    control.rate_per_minute = rate_per_minute
    control.changed_by = user
    control.save()
    # What the pause held back is due now (held runs, with no next attempt, stay held).
    waiting = Effect.objects.filter(name=name, status__in=DELIVERABLE).filter(
        Q(next_attempt_at__isnull=False) | Q(status=EffectStatus.PENDING, attempts=0)
    )
    now = timezone.now()
    waiting.filter(next_attempt_at__gt=now).update(next_attempt_at=now)
    effect_ids = list(waiting.values_list("pk", flat=True))
    Effect.objects.filter(pk__in=effect_ids).update(dispatched_at=now)
    with batch():
        for effect_id in effect_ids:
            enqueue_after_commit(DELIVER_EFFECT_TASK, effect_id)
    record_audit(
        None, AuditAction.EFFECT_RESUMED, actor=user, effect=name, rate_per_minute=rate_per_minute
    )
    return control


def _not_paused(control: EffectControl | None) -> str:
    rate = control.rate_per_minute if control is not None else None
    going = f"at {rate} per minute" if rate else "at full speed"
    return (
        f"this effect is not paused: its deliveries are going {going}, and "
        "nothing was changed "
        "(to resume it at another rate, pause it first)"
    )


def effect_is_authorized(effect: Effect) -> bool:
    """Audit check: did policy (and, where it asks, a fresh counted approval) allow this row?"""
    run = effect.run
    auth = effect.authorization
    if auth.get("policy_version") != run.policy_version or effect.name != run.effect_name:
        return False
    if not run.rules or not all(rule["passed"] for rule in run.rules):
        return False
    rule = PolicyVersion.objects.get(name=run.policy_version).parsed.approvals.get(effect.name)
    if rule is None:
        return True
    request = ApprovalRequest.objects.filter(pk=auth.get("approval_request"), run=run).first()
    if request is None or request.status != ApprovalStatus.APPROVED:
        return False
    counted = request.decisions.filter(counted=True, approve=True).values("user").distinct()
    return request.binding() == binding_of(run) and counted.count() >= rule.approvers
