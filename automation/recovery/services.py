"""Exception queues and recovery: claim, correct, retry, resume, replay, resolve, in batches.

Every operation checks a permission, locks the run and leaves a RecoveryAction (who, what,
why, result) beside the audit trail. Those that move a run (correct, retry, resume, replay,
resolve) also require a reason and go through the state machine. Taking a queue item
(claim, assign, release) only changes who works the run, not its state, and needs no reason.
None can skip policy or approval, and none can produce a second effect: retries reuse the
effect's key, and a replay reaches the same key at the effect boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django_fsm import has_transition_perm
from pydantic import ValidationError

from audit.models import AuditAction
from automation.classifiers.models import LabelSource
from automation.classifiers.quality import label_record
from automation.conf import setting
from automation.effects.models import Effect, EffectStatus
from automation.effects.services import effect_retry_in_transaction
from automation.extraction import extraction_problems
from automation.intake.customers import customers_known
from automation.intake.services import intake_replay
from automation.pipeline.operations import (
    RECOVER_RUN,
    run_prepare_in_transaction,
    run_reconsider,
    run_resume_in_transaction,
)
from automation.recovery.jobs import job_settled
from automation.recovery.models import BatchStatus, RecoveryAction, RecoveryBatch, RecoveryKind
from automation.recovery.preview import Result, preview_runs
from automation.recovery.selectors import current_reading
from automation.runs.journal import Stage, add_checkpoint, record_audit, record_transition
from automation.runs.models import (
    CORRECTABLE_HOLDS,
    EFFECT_HOLDS,
    RETRYABLE_STAGE_HOLDS,
    Run,
    StageName,
    StageOutcome,
    State,
    run_rejected_by_approver,
)
from automation.runs.payloads import policy_for
from automation.runs.sendable import effect_problems
from automation.runs.sending import run_send
from automation.schemas import (
    FieldProblem,
    decision_contract,
    validation_problems,
)
from core import limits
from core.codes import Outcome, Refusal
from core.errors import ServiceError, state_conflict
from core.limits import within
from policy.services import policy_get
from worker import dispatch
from worker.dispatch import Priority, enqueue_after_commit

BATCH_TASK = "automation.tasks.process_batch"
# Holds a person can fix by correcting the interpretation.
CORRECTABLE = CORRECTABLE_HOLDS


def _require(user: User, permission: str) -> None:
    if not user.has_perm(f"automation.{permission}"):
        raise PermissionDenied(f"you need the {permission} permission")


def _reason(reason: str) -> str:
    if not reason.strip():
        raise ServiceError(Refusal.REASON_REQUIRED, "say why: the reason goes on the run's record")
    return within(reason.strip(), what="the reason")


def _record(
    run: Run,
    action: RecoveryKind,
    user: User,
    reason: str,
    result: str,
    batch: RecoveryBatch | None = None,
    **data: Any,
) -> RecoveryAction:
    if batch is not None and batch.created_by_id != user.pk:
        data["prepared_by"] = batch.created_by.get_username()
    return RecoveryAction.objects.create(
        run=run, action=action, actor=user, reason=reason, result=result, batch=batch, data=data
    )


def _locked(run_id: int) -> Run:
    return Run.objects.select_for_update(of=("self",)).select_related("channel").get(pk=run_id)


# --- queue items: claim, assign, release ---------------------------------------------------


@transaction.atomic(durable=True)
def queue_claim(*, run_id: int, user: User) -> Run:
    """Take a queue item. Two people claiming at once: the row lock lets one win."""
    _require(user, "work_queue")
    run = _locked(run_id)
    if not run.queue:
        raise ServiceError(Refusal.NOT_QUEUED, "this run is not in an exception queue")
    if run.owner_id not in (None, user.pk):
        raise ServiceError(Refusal.CLAIMED, f"{run.owner} already works on this run")
    return _set_owner(run, user, user, RecoveryKind.CLAIM, "")


@transaction.atomic(durable=True)
def queue_assign(*, run_id: int, user: User, assignee: User, reason: str = "") -> Run:
    _require(user, "work_queue")
    run = _locked(run_id)
    if not run.queue:
        raise ServiceError(Refusal.NOT_QUEUED, "this run is not in an exception queue")
    return _set_owner(run, assignee, user, RecoveryKind.ASSIGN, reason)


@transaction.atomic(durable=True)
def queue_release(*, run_id: int, user: User) -> Run:
    _require(user, "work_queue")
    run = _locked(run_id)
    return _set_owner(run, None, user, RecoveryKind.RELEASE, "")


# Most runs one bulk claim takes: a page of a queue, twice over.
CLAIM_MANY_LIMIT = 200


@dataclass(frozen=True)
class ClaimMany:
    """What a bulk claim did: the runs now the user's, those another person holds (run id to
    their username), and those no longer in a queue (worked or gone meanwhile)."""

    claimed: list[int]
    taken: dict[int, str]
    not_queued: list[int]


@transaction.atomic(durable=True)
def queue_claim_many(*, run_ids: list[int], user: User) -> ClaimMany:
    """Take every listed queue item that is free (or already the user's); leave the rest.

    The rows are locked in one statement, in id order: two people claiming overlapping sets
    at once wait for each other row by row in the same order, so they cannot deadlock, and
    whoever locks a run first owns it (the other sees the owner and skips it)."""
    _require(user, "work_queue")
    wanted = sorted(set(run_ids))
    if len(wanted) > CLAIM_MANY_LIMIT:
        raise ServiceError(
            Refusal.TOO_MANY,
            f"nothing was claimed: claim at most {CLAIM_MANY_LIMIT} runs at once "
            f"({len(wanted)} were chosen)",
        )
    runs = Run.objects.select_for_update(of=("self",)).filter(pk__in=wanted).order_by("pk")
    queued = [run for run in runs if run.queue]
    claimed = []
    for run in queued:
        if run.owner_id == user.pk:
            run.owner = user  # the previous owner _set_owner records, without a query
        if run.owner_id in (None, user.pk):
            _set_owner(run, user, user, RecoveryKind.CLAIM, "")
            claimed.append(run.pk)
    # Others' runs: their owners named by id as the locked rows hold them, in one query.
    others = {run.pk: run.owner_id for run in queued if run.owner_id != user.pk}
    names = dict(User.objects.filter(pk__in=set(others.values())).values_list("pk", "username"))
    taken = {pk: names.get(owner, "") for pk, owner in others.items()}
    not_queued = [pk for pk in wanted if pk not in claimed and pk not in taken]
    return ClaimMany(claimed=claimed, taken=taken, not_queued=not_queued)


def _set_owner(run: Run, owner: User | None, user: User, action: RecoveryKind, reason: str) -> Run:
    previous = run.owner.get_username() if run.owner else None
    run.owner = owner
    run.claimed_at = timezone.now() if owner else None
    run.save(update_fields=["owner", "claimed_at"])
    new = owner.get_username() if owner else None
    _record(run, action, user, reason, "ok", previous_owner=previous, owner=new)
    return run


# --- correction ------------------------------------------------------------------------


@dataclass(frozen=True)
class CorrectionResult:
    run: Run
    changed: dict[str, list[Any]]


class CorrectionInvalid(ServiceError):
    """A correction the classifier's schema or the extraction checks refuse, field by field."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        text = "; ".join(f"{p.field}: {p.message}" for p in problems)
        super().__init__(Refusal.INVALID_CORRECTION, text)
        self.problems = problems


def run_correct(
    *, run_id: int, user: User, corrected: dict[str, Any], reason: str
) -> CorrectionResult:
    """Replace a held run's interpretation with a person's, then go through policy again.

    Validated with the classifier's own schema; the corrected fields get confidence 1.0
    (a person read them). The corrector is on the record and may not approve this run.
    """
    _require(user, "correct_run")
    reason = _reason(reason)
    with transaction.atomic(durable=True):
        run = _locked(run_id)
        if run.state != State.NEEDS_REVIEW or run.outcome not in CORRECTABLE:
            raise ServiceError(Refusal.STATE_CONFLICT, f"a {run.state} run cannot be corrected")
        problems = correction_problems(corrected, run)
        if problems:
            raise CorrectionInvalid(problems)
        # What the person saw and corrected.
        after, changed = _person_reading(run, user, corrected, current_reading(run))
        record_transition(run, run.correct_reading, **_read_by(user, reason, after, changed))
        _record(run, RecoveryKind.CORRECT, user, reason, "resumed", changed=changed)
        run_send(run)
        return CorrectionResult(run, changed)


def run_correct_rejected(
    *, run_id: int, user: User, corrected: dict[str, Any], reason: str
) -> CorrectionResult:
    """Correct the reading of a run an approver rejected, and have it decided again: as a
    new run (a finished run is never reopened), a replay of the rejected one whose reading is
    the person's. Policy decides it under today's version and a fresh approval is asked for
    where policy asks one. The corrector is on the record of both runs and may not approve
    the new one. The result names the new run."""
    _require(user, "correct_run")
    reason = _reason(reason)
    with transaction.atomic(durable=True):
        original = _locked(run_id)
        if not run_rejected_by_approver(original):
            raise ServiceError(
                Refusal.STATE_CONFLICT, "only a run an approver rejected is corrected this way"
            )
        if not has_transition_perm(original.correct_rejected, user):
            raise PermissionDenied("you may not correct runs")
        replay = intake_replay(original=original)
        if replay.state != State.RECEIVED:  # today's policy refuses the request outright
            raise ServiceError(
                Refusal.STATE_CONFLICT, f"not decided again: {replay.failure_detail}"
            )
        run_prepare_in_transaction(run=replay, now=timezone.now())
        # Under the new run's catalogue, with its event and customer (the effect's parameters
        # read them); a refusal rolls the new run back with everything else.
        problems = correction_problems(corrected, replay)
        if problems:
            raise CorrectionInvalid(problems)
        note = {"reason": reason, "corrected_as": replay.pk}
        record_transition(original, original.correct_rejected, actor=user, note=note)
        record_audit(
            replay, AuditAction.RUN_REPLAY_STARTED, actor=user, replay_of=original.pk, reason=reason
        )
        after, changed = _person_reading(replay, user, corrected, current_reading(original))
        record_transition(replay, replay.correct_replay, **_read_by(user, reason, after, changed))
        kind = RecoveryKind.CORRECT_REJECTED
        _record(original, kind, user, reason, f"corrected as run {replay.pk}", replay=replay.pk)
        _record(replay, kind, user, reason, "resumed", replay_of=original.pk, changed=changed)
        run_send(replay)
        return CorrectionResult(replay, changed)


def _read_by(
    user: User, reason: str, after: dict[str, Any], changed: dict[str, Any]
) -> dict[str, Any]:
    """What a transition giving the run a person's reading records: who, why and what changed."""
    return {
        "stage": Stage(StageName.CLASSIFY),
        "stage_outcome": StageOutcome.CORRECTED,
        "actor": user,
        "note": {"reason": reason, "changed": changed},
        "decision": after,
    }


def _person_reading(
    run: Run, user: User, corrected: dict[str, Any], before: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """A person's reading of the run (already checked), labelled and checkpointed as theirs,
    before the transition that gives it to the run: the reading and what changed from
    `before`."""
    business = policy_for(run).parsed.business
    after = decision_contract(business).model_validate(corrected).model_dump(mode="json")
    changed = _diff(before, after)
    label_record(
        run,
        source=LabelSource.CORRECTION,
        actor=user,
        category=after["category"],
        effect=after["requested_effect"],
    )
    add_checkpoint(run, {"classification": after, "corrected_by": user.pk}, "correction")
    return after, changed


def correction_problems(corrected: dict[str, Any], run: Run) -> list[FieldProblem]:
    """Everything wrong with a person's reading of this run at once: the problems under the
    run's catalogue version and the extracted fields' checks (a wrong reason code does not
    hide a wrong amount). Empty: it can be saved. Reads only (the customer references), so a
    form shows them all."""
    try:
        decision_contract(policy_for(run).parsed.business).model_validate(corrected)
        problems = []
    except ValidationError as exc:
        problems = validation_problems(exc)
    fields = corrected.get("fields")
    checked = extraction_problems(
        fields if isinstance(fields, dict) else {},
        known_customers=customers_known,
        language=(run.enrichment or {}).get("language") or None,
    )
    named = {p.field for p in problems}
    problems += [p for p in checked if p.field not in named]
    # The effect's parameters, as the outbox will hold them (automation.runs.sendable):
    # saving a reading they fail would only hold the run again, or send it without them.
    effect = corrected.get("requested_effect")
    if isinstance(effect, str) and isinstance(fields, dict):
        named = {p.field for p in problems}
        business = policy_for(run).parsed.business
        problems += [
            p for p in effect_problems(business, effect, run, corrected) if p.field not in named
        ]
    return problems


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    flat_before = _flatten(before)
    flat_after = _flatten(after)
    keys = sorted(set(flat_before) | set(flat_after))
    return {
        k: [flat_before.get(k), flat_after.get(k)]
        for k in keys
        if flat_before.get(k) != flat_after.get(k)
    }


def _flatten(classification: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in classification.items() if k != "fields"}
    for name, field in (classification.get("fields") or {}).items():
        flat[f"fields.{name}"] = field.get("value") if isinstance(field, dict) else field
    return flat


# --- retry, resume, replay, resolve -------------------------------------------------------


def run_retry(*, run_id: int, user: User, reason: str) -> str:
    """Retry the failed stage of a held run, for retryable failures only.

    A refusal is recorded (a RecoveryAction) and committed before it is raised.
    """
    with transaction.atomic(durable=True):
        result = _retry(run_id, user, reason, None)
    if result == Outcome.STATE_CONFLICT:
        raise state_conflict("retry")
    return result


def run_retry_effect(*, run_id: int, user: User, reason: str) -> str:
    """Deliver a held run's effect again: same key, a fresh attempt budget and deadline.

    Only the effect: a run held for another reason is refused, and the refusal recorded.
    """
    with transaction.atomic(durable=True):
        result = _retry(run_id, user, reason, None, effect_only=True)
    if result == Outcome.STATE_CONFLICT:
        raise state_conflict("retry")
    return result


def _retry(
    run_id: int, user: User, reason: str, batch: RecoveryBatch | None, effect_only: bool = False
) -> str:
    """The one retry, in the caller's transaction (a batch's item): a held effect is
    delivered again, a failed stage run again; either way a RecoveryAction says who and why."""
    _require(user, "recover_run")
    reason = _reason(reason)
    run = _locked(run_id)
    if effect_only or (run.state == State.NEEDS_REVIEW and run.outcome in EFFECT_HOLDS):
        # Refuses, on the audit trail, a run whose effect is not held.
        result = effect_retry_in_transaction(run_id=run.pk, user=user, reason=reason)
    elif run.state == State.NEEDS_REVIEW and run.outcome in RETRYABLE_STAGE_HOLDS:
        record_transition(run, run.retry_stage, actor=user, note={"reason": reason})
        run_send(run)
        result = run.state
    else:
        result = Outcome.STATE_CONFLICT
    _record(run, RecoveryKind.RETRY, user, reason, result, batch, held_for=run.outcome)
    return result


def run_resume(*, run_id: int, user: User, reason: str) -> str:
    """Continue a held run from its latest checkpoint, revalidating what it holds.

    The one resume: it checks the person's permission and records who asked and why.
    """
    _require(user, "recover_run")
    reason = _reason(reason)
    with transaction.atomic(durable=True):
        result = run_resume_in_transaction(
            run_id=run_id, actor_label=user.get_username(), actor=user
        )
        _record(_locked(run_id), RecoveryKind.RESUME, user, reason, result)
    if result == Outcome.STATE_CONFLICT:
        raise state_conflict("resume")
    return result


def run_replay(*, run_id: int, user: User, reason: str) -> Run:
    """A new run from the stored input of a finished one, linked to it.

    It is decided again under today's policy and reaches the same effect key: an effect the
    original delivered is not delivered again.
    """
    with transaction.atomic(durable=True):
        return _replay(run_id, user, reason, None)


def _replay(run_id: int, user: User, reason: str, batch: RecoveryBatch | None) -> Run:
    """run_replay in the caller's transaction (a batch's item)."""
    _require(user, "recover_run")
    reason = _reason(reason)
    original = _locked(run_id)
    if not original.is_terminal:
        raise ServiceError(
            Refusal.STATE_CONFLICT, "only a finished run is replayed; retry or resume this one"
        )
    if not has_transition_perm(original.replay, user):
        raise PermissionDenied("you may not replay runs")
    replay = intake_replay(original=original)
    # On the trail of both runs, with who did it: whoever replays a run has acted on the
    # replay and may not approve it (approvals.selectors reads these rows).
    record_transition(
        original, original.replay, actor=user, note={"replayed_as": replay.pk, "reason": reason}
    )
    record_audit(
        replay, AuditAction.RUN_REPLAY_STARTED, actor=user, replay_of=original.pk, reason=reason
    )
    _record(
        original,
        RecoveryKind.REPLAY,
        user,
        reason,
        f"replayed as run {replay.pk}",
        batch,
        replay=replay.pk,
    )
    _record(replay, RecoveryKind.REPLAY, user, reason, "started", batch, replay_of=original.pk)
    return replay


def run_resolve(*, run_id: int, user: User, reason: str, evidence: str, done: bool) -> str:
    """A person closes a held or uncertain run: done by hand (with evidence) or abandoned."""
    _require(user, "recover_run")
    reason = _reason(reason)
    if not evidence.strip():
        raise ServiceError(
            Refusal.EVIDENCE_REQUIRED, "describe what was done, or why it is dropped"
        )
    within(evidence, limit=limits.EVIDENCE, what="the evidence")
    with transaction.atomic(durable=True):
        run = _locked(run_id)
        if run.state != State.NEEDS_REVIEW:
            raise ServiceError(Refusal.STATE_CONFLICT, f"a {run.state} run cannot be resolved")
        transition = run.resolve_by_hand if done else run.abandon
        if not has_transition_perm(transition, user):
            raise PermissionDenied("you may not resolve runs")
        effect = Effect.objects.select_for_update().filter(run=run).first()
        if done and effect is not None and effect.status != EffectStatus.DELIVERED:
            effect.deliver_by_hand(
                reference=f"by hand: {user.get_username()}"[:200], now=timezone.now()
            )
            effect.save(update_fields=["status", "response_ref", "delivered_at"])
        record_transition(
            run,
            transition,
            actor=user,
            note={"reason": reason, "evidence": evidence},
            finished_at=timezone.now(),
        )
        _record(
            run,
            RecoveryKind.RESOLVE if done else RecoveryKind.ABANDON,
            user,
            reason,
            run.state,
            evidence=evidence,
        )
        return run.state


# --- the run's admin page ---------------------------------------------------------------


class Operation(Protocol):
    def __call__(self, *, run_id: int, user: User, reason: str) -> str: ...


@dataclass(frozen=True)
class RunOperation:
    """An operation started from the run's admin page, and the permission it needs: the one
    its transition declares, checked before anything about the run is read or recorded."""

    service: Operation
    permission: str


# Operations a person can start from the run's admin page, by transition name.
OPERATIONS: dict[str, RunOperation] = {
    "reconsider": RunOperation(run_reconsider, RECOVER_RUN),
    "retry_effect": RunOperation(run_retry_effect, RECOVER_RUN),
}


def run_operations_for(*, run: Run, user: User) -> list[dict[str, str]]:
    """The transitions this person may start on this run now, for buttons."""
    return [
        {
            "name": t.name,
            "label": t.custom.get("label", t.name),
            "help": t.custom.get("help_text", ""),
        }
        for t in run.get_available_user_state_transitions(user)  # type: ignore[attr-defined]
        if t.custom.get("admin") and t.name in OPERATIONS
    ]


# --- batches -----------------------------------------------------------------------------

BATCH_ACTIONS = (RecoveryKind.RETRY, RecoveryKind.REPLAY)
HELD_EFFECTS = (Outcome.EFFECT_UNAVAILABLE, Outcome.EFFECT_UNCERTAIN)


def batch_select(*, queue: str, since: datetime, until: datetime) -> list[int]:
    return list(
        Run.objects.filter(queue=queue, queued_at__gte=since, queued_at__lte=until)
        .order_by("queued_at", "pk")
        .values_list("pk", flat=True)
    )


@transaction.atomic(durable=True)
def batch_create(
    *,
    action: str,
    queue: str,
    since: datetime,
    until: datetime,
    user: User,
    reason: str,
    in_worker: bool = True,
) -> RecoveryBatch:
    """Select the runs now; a worker (or the caller) works them (progress on the batch row)."""
    _require(user, "recover_run")
    if action not in BATCH_ACTIONS:
        raise ServiceError(Refusal.BAD_ACTION, f"a batch can {' or '.join(BATCH_ACTIONS)}")
    ids = batch_select(queue=queue, since=since, until=until)
    batch = _batch_new(action, queue, (since, until), user, reason, ids, started=True)
    if in_worker:
        enqueue_after_commit(BATCH_TASK, batch.pk, priority=Priority.URGENT)
    return batch


@transaction.atomic(durable=True)
def batch_preview(
    *, action: str, queue: str, since: datetime, until: datetime, user: User, reason: str
) -> RecoveryBatch:
    """Select the runs and say what the batch would do to each; nothing starts until a
    person starts it from this preview (`batch_start`), while it is still true."""
    _require(user, "recover_run")
    if action not in BATCH_ACTIONS:
        raise ServiceError(Refusal.BAD_ACTION, f"a batch can {' or '.join(BATCH_ACTIONS)}")
    ids = batch_select(queue=queue, since=since, until=until)
    batch = _batch_new(action, queue, (since, until), user, reason, ids)
    batch.show_preview(
        rows=[row.as_dict() for row in preview_runs(run_ids=ids, action=action, user=user)],
        now=timezone.now(),
        policy=policy_get(name=None, document=False).name,
    )
    batch.save(update_fields=["preview", "previewed_at", "preview_policy", "status"])
    return batch


def preview_staleness(batch: RecoveryBatch, user: User, now: datetime) -> str:
    """Why the batch's preview no longer holds ("" while it does): too old, another policy
    active since, or a run that would now come to something else."""
    if batch.previewed_at is None:
        return "it was never previewed"
    age = (now - batch.previewed_at).total_seconds()
    limit = setting("PREVIEW_FRESH_SECONDS")
    if age > limit:
        return f"it is {int(age // 60)} minutes old; a batch starts from one under {limit // 60}"
    active = policy_get(name=None, document=False).name
    if active != batch.preview_policy:
        return f"the active policy is now {active}, not {batch.preview_policy}"
    now_rows = [
        r.as_dict() for r in preview_runs(run_ids=batch.run_ids, action=batch.action, user=user)
    ]
    changed = sum(1 for a, b in zip(batch.preview, now_rows, strict=False) if a != b)
    changed += abs(len(batch.preview) - len(now_rows))
    if changed:
        return f"{changed} run{'' if changed == 1 else 's'} would now come to something else"
    return ""


_DONE_TO: dict[str, str] = {RecoveryKind.RETRY: "retried", RecoveryKind.REPLAY: "replayed"}


def batch_start(*, batch_id: int, user: User) -> RecoveryBatch:
    """Start a previewed batch: only by someone who may recover runs, and only while its
    preview is fresh and still true. A refused start leaves the preview as it was."""
    _require(user, "recover_run")
    with transaction.atomic(durable=True):
        batch = RecoveryBatch.objects.select_for_update().get(pk=batch_id)
        if batch.status != BatchStatus.PREVIEW:
            raise ServiceError(Refusal.STATE_CONFLICT, "this batch has already been started")
        stale = preview_staleness(batch, user, timezone.now())
        if stale:
            raise ServiceError(Refusal.PREVIEW_STALE, f"the preview is out of date: {stale}")
        # It works the runs its preview said it can: the others are left as they are, and
        # the button said how many it would do.
        doable = [r["run"] for r in batch.preview if r["result"] != Result.NOT_POSSIBLE]
        if not doable:
            raise ServiceError(
                Refusal.STATE_CONFLICT,
                f"none of its runs can be {_DONE_TO[batch.action]} now; nothing was started",
            )
        batch.start(run_ids=doable, user=user, now=timezone.now())
        batch.save(update_fields=["run_ids", "status", "started_by", "started_at"])
        enqueue_after_commit(BATCH_TASK, batch.pk, priority=Priority.URGENT)
        return batch


def held_effects_select(*, outcome: str, since: datetime, until: datetime) -> list[int]:
    """Runs held for their effect (or, asked explicitly, another outcome) in a time window."""
    return list(
        Run.objects.filter(
            state=State.NEEDS_REVIEW, outcome=outcome, updated_at__gte=since, updated_at__lt=until
        )
        .order_by("updated_at")
        .values_list("pk", flat=True)
    )


@transaction.atomic(durable=True)
def held_effects_batch(
    *, since: datetime, until: datetime, user: User, reason: str, outcome: str = ""
) -> RecoveryBatch:
    """A batch retrying the effect of every run held for it in a window (an outage over).

    The caller works it (`batch_step`); each item is a `run_retry_effect`, recorded alike.
    """
    _require(user, "recover_run")
    outcome = outcome or Outcome.EFFECT_UNAVAILABLE
    ids = held_effects_select(outcome=outcome, since=since, until=until)
    kind = RecoveryKind.RETRY_EFFECT
    return _batch_new(kind, outcome, (since, until), user, reason, ids, started=True)


def _batch_new(
    action: str,
    queue: str,
    window: tuple[datetime, datetime],
    user: User,
    reason: str,
    run_ids: list[int],
    *,
    started: bool = False,
) -> RecoveryBatch:
    """A new batch by `user`; `started`: they start it now too (no preview to start from)."""
    since, until = window
    return RecoveryBatch.objects.create(
        action=action,
        queue=queue,
        since=since,
        until=until,
        reason=_reason(reason),
        created_by=user,
        run_ids=run_ids,
        started_by=user if started else None,
        started_at=timezone.now() if started else None,
    )


def effects_retry_held(
    *, since: datetime, until: datetime, user: User, reason: str, outcome: str = ""
) -> RecoveryBatch:
    """Retry every held effect of a window now, in this process; the finished batch."""
    batch = held_effects_batch(since=since, until=until, user=user, reason=reason, outcome=outcome)
    return batch_process(batch_id=batch.pk)


# Items worked per transaction: their messages go to the `bulk` queue in one statement.
BATCH_CHUNK = 50


def batch_step(*, batch_id: int) -> bool:
    """Do the next items of a batch; False when there is nothing left.

    The position is committed with each chunk of items, so a worker restarting mid-batch
    carries on where the last one stopped, and a duplicated message finds the items done.
    Each item has a savepoint of its own: one that fails is noted and the rest go on.
    """
    with transaction.atomic(durable=True), dispatch.batch(priority=Priority.BULK):
        batch_row = RecoveryBatch.objects.select_for_update().get(pk=batch_id)
        if batch_row.status == BatchStatus.PREVIEW or job_settled(batch_row):
            return False  # a preview is worked only once a person starts it
        for run_id in batch_row.run_ids[batch_row.done : batch_row.done + BATCH_CHUNK]:
            ok, why = _batch_item(batch_row, run_id)
            batch_row.done += 1
            batch_row.succeeded += ok
            if not ok:
                batch_row.failures = [*batch_row.failures, {"run": run_id, "reason": why}]
        batch_row.advance()
        batch_row.save(update_fields=["done", "succeeded", "failures", "status"])
        return True


def batch_actor(batch: RecoveryBatch) -> User:
    """Whom a batch's items are done as: whoever started it (its creator, for a batch
    started before the starter was kept)."""
    return batch.started_by or batch.created_by


def _batch_item(batch: RecoveryBatch, run_id: int) -> tuple[bool, str]:
    actor = batch_actor(batch)
    try:
        with transaction.atomic():  # a savepoint: an item that fails rolls back alone
            if batch.action == RecoveryKind.REPLAY:
                _replay(run_id, actor, batch.reason, batch)
                _prepared(batch, run_id, actor)
                return True, ""
            effect_only = batch.action == RecoveryKind.RETRY_EFFECT
            result = _retry(run_id, actor, batch.reason, batch, effect_only)
            ok = result != Outcome.STATE_CONFLICT
            if ok:
                _prepared(batch, run_id, actor)
            return ok, "" if ok else "not retryable in its current state"
    except (ServiceError, PermissionDenied, ValueError) as exc:
        return False, str(exc)


def _prepared(batch: RecoveryBatch, run_id: int, actor: User) -> None:
    """Put whoever prepared the batch on the trail of a run it worked, when someone else
    started it: they chose the run and wrote the reason, so they acted on it too and may
    not approve it, nor a replay of it (approvals.selectors reads the trail)."""
    if batch.created_by_id == actor.pk:
        return
    record_audit(
        Run.objects.get(pk=run_id),
        AuditAction.RUN_BATCH_PREPARED,
        actor=batch.created_by,
        batch=batch.pk,
        started_by=actor.pk,
        reason=batch.reason,
    )


def batch_process(*, batch_id: int) -> RecoveryBatch:
    while batch_step(batch_id=batch_id):
        pass
    return RecoveryBatch.objects.get(pk=batch_id)
