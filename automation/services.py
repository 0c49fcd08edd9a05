"""Run use cases. Each owns its transaction: lock, check, transition, save, record, enqueue.

Every transition commits together with its AuditEvent, its StageRecord and (where meaningful)
its Checkpoint; follow-up work is enqueued only after commit. Tasks call these functions with
ids; a message that arrives twice or late finds the state moved on and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django_fsm import has_transition_perm
from pydantic import ValidationError

from approvals import services as approvals
from approvals.models import ApprovalRequest, ApprovalStatus
from audit.services import SYSTEM, audit_record
from automation.classifiers import (
    ClassifierInput,
    ClassifierTimeout,
    ClassifierUnavailable,
    get_classifier,
)
from automation.conf import setting
from automation.effects import get_adapter
from automation.models import (
    ApiToken,
    AuditEvent,
    Checkpoint,
    ClassificationAttempt,
    Effect,
    EffectStatus,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    StageRecord,
    State,
)
from automation.schemas import (
    ClassifierDecision,
    FieldProblem,
    IntakeEvent,
    fingerprint,
    validation_problems,
)
from config.dispatch import enqueue_after_commit
from policy.evaluation import EventFacts, Interpretation, Verdict, check_request_allowed, evaluate
from policy.models import PolicyVersion
from policy.services import policy_get

log = logging.getLogger(__name__)

ADVANCE_RUN_TASK = "automation.tasks.advance_run"
DELIVER_EFFECT_TASK = "automation.tasks.deliver_effect"


# --- small helpers shared by the stages ---------------------------------------------------


@dataclass
class Stage:
    """Times one stage attempt; written as a StageRecord in the same transaction."""

    name: str
    attempt: int = 1
    started_at: datetime = field(default_factory=timezone.now)
    _clock: float = field(default_factory=time.monotonic)

    def record(self, run: Run, outcome: str, error_class: str = "") -> StageRecord:
        elapsed_ms = int((time.monotonic() - self._clock) * 1000)
        return StageRecord.objects.create(
            run=run,
            stage=self.name,
            attempt=self.attempt,
            started_at=self.started_at,
            finished_at=self.started_at + timedelta(milliseconds=elapsed_ms),
            duration_ms=elapsed_ms,
            outcome=outcome,
            error_class=error_class,
        )


def _versions(run: Run) -> dict[str, str]:
    return {
        "workflow": run.workflow_version,
        "classifier": run.classifier_version,
        "prompt": run.prompt_version,
        "policy": run.policy_version,
    }


def _checkpoint(run: Run, data: dict[str, Any], source: str = "pipeline") -> Checkpoint:
    last = run.checkpoints.order_by("-sequence").values_list("sequence", flat=True).first()
    return Checkpoint.objects.create(
        run=run,
        sequence=(last or 0) + 1,
        state=run.state,
        versions=_versions(run),
        data=data,
        source=source,
    )


def _audit(
    run: Run | None,
    action: str,
    *,
    actor: User | None = None,
    actor_label: str = SYSTEM,
    from_state: str = "",
    intake: IntakeRecord | None = None,
    **data: Any,
) -> AuditEvent:
    return audit_record(
        action=action,
        actor=actor,
        actor_label=actor_label,
        run_id=run.pk if run is not None else None,
        intake_id=intake.pk if intake is not None else None,
        from_state=from_state,
        to_state=run.state if run is not None else "",
        **data,
    )


def _move(
    run: Run,
    name: str,
    *,
    stage: Stage | None = None,
    stage_outcome: str = "ok",
    checkpoint: dict[str, Any] | None = None,
    actor: User | None = None,
    note: dict[str, Any] | None = None,
    **kwargs: Any,
) -> None:
    """Apply one transition and write everything that commits with it.

    `kwargs` go to the transition method; `note` only to the audit row (a reason, say).
    """
    before = run.state
    getattr(run, name)(**kwargs)
    run.save()
    if stage is not None:
        stage.record(run, stage_outcome)
    if checkpoint is not None:
        _checkpoint(run, checkpoint)
    _audit(run, f"run.{name}", actor=actor, from_state=before, outcome=run.outcome, **(note or {}))


def _lock_run(run_id: int, *, wait: bool = False) -> Run | None:
    """Lock the run row.

    By default SKIP LOCKED: None when another worker holds the row, because that worker is
    taking this very step and a duplicate message should simply stand aside. With wait=True
    (used by whoever already owns the work, such as a worker holding the classifier lease
    with an answer in hand) it queues for the lock instead, so finished work is never dropped.
    """
    skip = not wait and connection.features.has_select_for_update_skip_locked
    query = Run.objects.select_for_update(skip_locked=skip)
    return query.filter(pk=run_id).select_related("channel").first()


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with full jitter, so retries of many runs do not stampede."""
    cap = min(
        setting("RETRY_BACKOFF_CAP_SECONDS"), setting("RETRY_BACKOFF_BASE_SECONDS") * 2**attempt
    )
    return random.uniform(cap / 2, cap)  # noqa: S311 - jitter, not cryptography


def effect_key(*, channel: str, fingerprint: str, effect: str) -> str:
    """From the request, never the attempt: every retry, replay or racing worker agrees on it."""
    return hashlib.sha256(f"{channel}\n{fingerprint}\n{effect}".encode()).hexdigest()


# --- integrators ------------------------------------------------------------------------


def api_token_create(*, name: str, channel: IntakeChannel) -> tuple[ApiToken, str]:
    """Issue a bearer token. The plain key is returned once; only its SHA-256 is stored."""
    key = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name, channel=channel, key_hash=hashlib.sha256(key.encode()).hexdigest()
    )
    return token, key


def channel_get_or_create(*, name: str, classifier: str = "recorded") -> IntakeChannel:
    """A channel stamped with the deployment's configured workflow and prompt versions."""
    channel, _ = IntakeChannel.objects.get_or_create(
        name=name,
        defaults={
            "classifier": classifier,
            "workflow_version": setting("WORKFLOW_VERSION"),
            "prompt_version": setting("PROMPT_VERSION"),
            "max_classifier_attempts": setting("CLASSIFIER_MAX_ATTEMPTS"),
        },
    )
    return channel


# --- intake ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntakeResult:
    code: str  # accepted, idempotent_replay, idempotency_conflict, invalid_event, unsupported
    intake: IntakeRecord
    run: Run | None
    problems: list[FieldProblem] = field(default_factory=list)
    malformed: bool = False  # the body was not JSON at all


def intake_submit(
    *, channel: IntakeChannel, raw: bytes, content_type: str, source: str
) -> IntakeResult:
    """Store the raw request first, then admit it. Bad input loses nothing and runs nothing."""
    intake = IntakeRecord.objects.create(
        channel=channel, raw=raw, content_type=content_type, source=source
    )
    return intake_admit(intake=intake)


def _parse_event(raw: bytes) -> tuple[IntakeEvent | None, Any, list[FieldProblem]]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, None, [FieldProblem(field="body", message=f"is not valid JSON: {exc}")]
    if not isinstance(data, dict):
        return None, data, [FieldProblem(field="body", message="must be a JSON object")]
    try:
        return IntakeEvent.model_validate(data), data, []
    except ValidationError as exc:
        return None, data, validation_problems(exc)


def intake_admit(*, intake: IntakeRecord) -> IntakeResult:
    """Validate, normalize, fingerprint and claim the event identity for one intake record."""
    event, data, problems = _parse_event(bytes(intake.raw))
    if event is None:
        event_id = data.get("event_id") if isinstance(data, dict) else None
        run = _create_invalid_run(intake, str(event_id or "")[:200], problems)
        return IntakeResult(Outcome.INVALID_EVENT, intake, run, problems, data is None)
    normalized = event.normalized()
    # Identity is the normalized event id: " evt-1 " and "evt-1" are one event.
    event_id = normalized["event_id"]
    owner = _identity_owner(intake.channel, event_id)
    if owner is not None:
        return _answer_duplicate(intake, owner, fingerprint(normalized))
    try:
        run = _create_run(intake, normalized)
    except IntegrityError:
        # Another submission of the same event committed first: answer as a duplicate.
        owner = _identity_owner(intake.channel, event_id)
        if owner is None:
            raise
        return _answer_duplicate(intake, owner, fingerprint(normalized))
    code = "accepted" if run.state == State.RECEIVED else run.outcome
    return IntakeResult(code, intake, run)


def _identity_owner(channel: IntakeChannel, event_id: str) -> Run | None:
    return Run.objects.filter(
        channel=channel, event_id=event_id, claims_identity=True, replay_of__isnull=True
    ).first()


def _new_run(intake: IntakeRecord, event_id: str) -> Run:
    channel = intake.channel
    return Run(
        channel=channel,
        intake=intake,
        event_id=event_id,
        workflow_version=channel.workflow_version,
        classifier_version=channel.classifier_version,
        prompt_version=channel.prompt_version,
    )


@transaction.atomic
def _create_invalid_run(intake: IntakeRecord, event_id: str, problems: list[FieldProblem]) -> Run:
    run = _new_run(intake, event_id)
    run.save()
    detail = json.dumps([p.model_dump() for p in problems])
    _move(
        run,
        "fail",
        stage=Stage("intake"),
        stage_outcome=Outcome.INVALID_EVENT,
        checkpoint={"problems": json.loads(detail)},
        outcome=Outcome.INVALID_EVENT,
        field=problems[0].field,
        detail=detail,
        finished_at=timezone.now(),
    )
    return run


@transaction.atomic
def _create_run(intake: IntakeRecord, normalized: dict[str, Any]) -> Run:
    """Create the run at `received` owning (channel, event id); the unique index arbitrates."""
    stage = Stage("intake")
    run = _new_run(intake, normalized["event_id"])
    run.claims_identity = True
    run.normalized = normalized
    run.fingerprint = fingerprint(normalized)
    run.save()
    stage.record(run, "accepted")
    _audit(run, "run.received", intake=intake, fingerprint=run.fingerprint)
    allowed = check_request_allowed(_policy_for(run).parsed, _facts(run))
    if not allowed.passed:
        run.rules = [allowed.as_dict()]
        _move(
            run,
            "fail",
            checkpoint={"rules": run.rules},
            outcome=Outcome.UNSUPPORTED_REQUEST,
            field="requested_action",
            detail=allowed.text,
            finished_at=timezone.now(),
        )
        return run
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
    return run


def _answer_duplicate(intake: IntakeRecord, owner: Run, new_fingerprint: str) -> IntakeResult:
    same = owner.fingerprint == new_fingerprint
    code = Outcome.IDEMPOTENT_REPLAY if same else Outcome.IDEMPOTENCY_CONFLICT
    # Recorded against the intake record; the existing run is not touched.
    _audit(
        None, f"intake.{code}", intake=intake, existing_run=owner.pk, fingerprint=new_fingerprint
    )
    problems = (
        []
        if same
        else [FieldProblem(field="event_id", message="was already used for different content")]
    )
    return IntakeResult(code, intake, owner, problems)


# --- the pipeline: one step per call ------------------------------------------------------


def run_advance(*, run_id: int, now: datetime | None = None) -> str | None:
    """Take the run's next step if one is due. Returns the state reached, or None if idle."""
    run = Run.objects.filter(pk=run_id).only("state").first()
    if run is None:
        return None
    step = _STEPS.get(run.state)
    if step is None:
        return None
    return step(run_id, now or timezone.now())


def _step_validate(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.RECEIVED:
            return None
        event = IntakeEvent.model_validate(run.normalized)  # stored after admission: re-check
        _move(run, "validate", stage=Stage("validate"), event_id=event.event_id)
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def _step_normalize(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.VALIDATED:
            return None
        normalized = IntakeEvent.model_validate(run.normalized).normalized()
        _move(
            run,
            "normalize",
            stage=Stage("normalize"),
            normalized=normalized,
            fingerprint=fingerprint(normalized),
        )
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def _facts(run: Run) -> EventFacts:
    if run.normalized is None:
        raise ValueError(f"run {run.pk} has no normalized event yet")
    return EventFacts(
        request_type=run.normalized["request_type"],
        requested_action=run.normalized["requested_action"],
        account_tier=run.normalized["account_tier"],
    )


def _step_enrich(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.NORMALIZED:
            return None
        facts = _facts(run)
        open_runs = (
            Run.objects.filter(channel=run.channel, normalized__request_type=facts.request_type)
            .exclude(state__in=[State.COMPLETED, State.BLOCKED, State.FAILED])
            .exclude(pk=run.pk)
            .count()
        )
        enrichment = {
            "account_tier": facts.account_tier,
            "priority_account": facts.account_tier == "priority",
            "open_runs_same_request_type": open_runs,
        }
        _move(
            run,
            "enrich",
            stage=Stage("enrich"),
            checkpoint={"enrichment": enrichment},
            enrichment=enrichment,
        )
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def _claim_classifier_attempt(run_id: int, now: datetime) -> tuple[Run, int] | None:
    """Take the lease on one classifier call; the call itself happens outside any transaction."""
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.ENRICHED:
            return None
        if run.next_attempt_at and run.next_attempt_at > now:
            return None  # a message that arrived before its backoff ran out
        if run.lease_expires_at and run.lease_expires_at > now:
            return None  # another worker is calling the classifier for this run right now
        run.classify_attempts += 1
        run.lease_expires_at = now + timedelta(seconds=setting("STAGE_LEASE_SECONDS"))
        run.save(update_fields=["classify_attempts", "lease_expires_at"])
        return run, run.classify_attempts


def _step_classify(run_id: int, now: datetime) -> str | None:
    claim = _claim_classifier_attempt(run_id, now)
    if claim is None:
        return None
    run, attempt = claim
    stage = Stage("classify", attempt=attempt)
    classifier = get_classifier(run.channel.classifier)
    raw: Any = None
    error: Exception | None = None
    try:
        raw = classifier.classify(
            ClassifierInput(run.channel.name, run.event_id, run.normalized or {}),
            attempt,
            deadline=float(setting("CLASSIFIER_DEADLINE_SECONDS")),
        )
    except (ClassifierTimeout, ClassifierUnavailable) as exc:
        error = exc
    return _record_classification(run_id, attempt, stage, raw, error, now)


def _record_classification(
    run_id: int, attempt: int, stage: Stage, raw: Any, error: Exception | None, now: datetime
) -> str | None:
    with transaction.atomic():
        run = _lock_run(run_id, wait=True)
        if run is None or run.state != State.ENRICHED or run.classify_attempts != attempt:
            return None  # our lease ran out and another worker took this attempt over
        outcome, decision, problems = _judge_output(raw, error)
        ClassificationAttempt.objects.create(
            run=run,
            attempt=attempt,
            classifier=run.channel.classifier,
            classifier_version=run.classifier_version,
            prompt_version=run.prompt_version,
            outcome=outcome,
            raw_output=raw if error is None else {"error": str(error)},
            errors=[p.model_dump() for p in problems],
            latency_ms=int((timezone.now() - stage.started_at).total_seconds() * 1000),
        )
        if error is not None:
            _classifier_failed(run, stage, error, now)
        elif decision is None:
            _move(
                run,
                "hold",
                stage=stage,
                stage_outcome=Outcome.CLASSIFICATION_INVALID,
                outcome=Outcome.CLASSIFICATION_INVALID,
                field=problems[0].field,
                detail=json.dumps([p.model_dump() for p in problems]),
            )
        else:
            _accept_classification(run, stage, decision)
        return run.state


def _judge_output(
    raw: Any, error: Exception | None
) -> tuple[str, ClassifierDecision | None, list[FieldProblem]]:
    if isinstance(error, ClassifierTimeout):
        return "timeout", None, []
    if error is not None:
        return "unavailable", None, []
    try:
        return "valid", ClassifierDecision.model_validate(raw), []
    except ValidationError as exc:
        return "invalid", None, validation_problems(exc)


def _classifier_failed(run: Run, stage: Stage, error: Exception, now: datetime) -> None:
    error_class = type(error).__name__
    if run.classify_attempts >= run.channel.max_classifier_attempts:
        stage.record(run, Outcome.RETRY_EXHAUSTED, error_class)
        _move(
            run,
            "hold",
            outcome=Outcome.RETRY_EXHAUSTED,
            field="classifier",
            detail=f"{run.classify_attempts} attempts, last: {error}",
        )
        return
    stage.record(run, "retry_scheduled", error_class)
    delay = backoff_delay(run.classify_attempts)
    _move(
        run,
        "schedule_classifier_retry",
        next_attempt_at=now + timedelta(seconds=delay),
    )


def _accept_classification(run: Run, stage: Stage, decision: ClassifierDecision) -> None:
    payload = decision.model_dump(mode="json")
    _move(
        run,
        "classify",
        stage=stage,
        checkpoint={"classification": payload},
        decision=payload,
    )
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)


def _policy_for(run: Run) -> PolicyVersion:
    return policy_get(name=run.channel.policy_version or None)


def _step_decide(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.CLASSIFIED:
            return None
        stage = Stage("decide")
        policy = _policy_for(run)
        classification = run.classification or {}
        decision = evaluate(
            policy.parsed,
            _facts(run),
            Interpretation(
                category=classification["category"],
                route=classification["recommended_route"],
                effect=classification["requested_effect"],
                confidence=classification.get("confidence"),
            ),
            run.enrichment,
        )
        decided = {
            "policy_version": policy.name,
            "verdict": decision.verdict.value,
            "route": decision.route,
            "effect": decision.effect,
            "rules": [r.as_dict() for r in decision.rules],
        }
        _apply_decision(run, stage, decision.verdict, decided, now)
        return run.state


def _apply_decision(
    run: Run, stage: Stage, verdict: Verdict, decided: dict[str, Any], now: datetime
) -> None:
    if verdict == Verdict.BLOCK:
        _move(
            run,
            "block",
            stage=stage,
            stage_outcome=Outcome.POLICY_BLOCK,
            checkpoint={"decision": decided},
            decided=decided,
            finished_at=now,
        )
    elif verdict == Verdict.UNSUPPORTED:
        run.rules = decided["rules"]
        _move(
            run,
            "fail",
            stage=stage,
            stage_outcome=Outcome.UNSUPPORTED_REQUEST,
            checkpoint={"decision": decided},
            outcome=Outcome.UNSUPPORTED_REQUEST,
            field="requested_action",
            finished_at=now,
        )
    elif verdict == Verdict.LOW_CONFIDENCE:
        run._record_decision(decided)
        _move(
            run,
            "hold",
            stage=stage,
            stage_outcome=Outcome.LOW_CONFIDENCE,
            outcome=Outcome.LOW_CONFIDENCE,
            field="confidence",
            detail="; ".join(r["text"] for r in decided["rules"] if not r["passed"]),
        )
    elif verdict == Verdict.APPROVE:
        _move(
            run,
            "require_approval",
            stage=stage,
            stage_outcome="approval_required",
            checkpoint={"decision": decided},
            decided=decided,
        )
        _open_approval(run, now)
    else:
        _move(
            run,
            "execute",
            stage=stage,
            stage_outcome="authorized",
            checkpoint={"decision": decided},
            decided=decided,
        )
        _write_effect(run, authorization={"policy_version": run.policy_version})


def _binding(run: Run) -> dict[str, str]:
    return {
        "fingerprint": run.fingerprint,
        "workflow_version": run.workflow_version,
        "policy_version": run.policy_version,
        "effect": run.effect_name,
    }


def _effect_payload(run: Run) -> dict[str, Any]:
    """The full, canonical parameters of the effect: what the approver sees and approves."""
    event = run.normalized or {}
    return {
        "effect": run.effect_name,
        "route": run.route,
        "event_id": event.get("event_id"),
        "request_type": event.get("request_type"),
        "account_tier": event.get("account_tier"),
        "subject": event.get("subject"),
    }


def _open_approval(run: Run, now: datetime) -> ApprovalRequest:
    rule = _policy_for_version(run).parsed.approvals[run.effect_name]
    classification = run.classification or {}
    evidence = {
        "classification": classification,
        "reason_code": run.reason_code,
        "confidence": run.confidence,
        "rules": [r for r in run.rules if r["rule_id"].startswith("approval.")],
        "versions": _versions(run),
        # Whoever acted on this run by hand (resumed, corrected, re-decided) may not approve it.
        "conflicted_user_ids": sorted(
            set(
                run.audit_events.filter(actor__isnull=False)
                .exclude(action__startswith="approval.")  # deciding is not correcting
                .values_list("actor_id", flat=True)
            )
        ),
    }
    return approvals.approval_request_open(
        run_id=run.pk,
        binding=_binding(run),
        effect_payload=_effect_payload(run),
        evidence=evidence,
        rule=rule,
        now=now,
    )


def _policy_for_version(run: Run) -> PolicyVersion:
    return PolicyVersion.objects.get(name=run.policy_version)


def _write_effect(run: Run, *, authorization: dict[str, Any]) -> Effect:
    """Write the outbox row in the transaction that moved the run to executing."""
    effect, _ = Effect.objects.get_or_create(
        idempotency_key=effect_key(
            channel=run.channel.name, fingerprint=run.fingerprint, effect=run.effect_name
        ),
        defaults={
            "run": run,
            "name": run.effect_name,
            "payload": _effect_payload(run),
            "authorization": authorization,
        },
    )
    enqueue_after_commit(DELIVER_EFFECT_TASK, effect.pk)
    return effect


def _latest_request(run: Run) -> ApprovalRequest | None:
    return run.approvals.order_by("-created_at", "-pk").first()


def _step_await_approval(run_id: int, now: datetime) -> str | None:
    """A decision arrived (or a request lapsed): act on the run's latest approval request."""
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.APPROVAL_REQUIRED:
            return None
        request = _latest_request(run)
        if request is None or request.status == ApprovalStatus.EXPIRED:
            _reopen_approval(run, Outcome.APPROVAL_EXPIRED, now)
        elif request.status == ApprovalStatus.REJECTED:
            _move(
                run,
                "fail",
                stage=Stage("approve"),
                stage_outcome=Outcome.APPROVAL_REJECTED,
                checkpoint={"approval_request": request.pk},
                outcome=Outcome.APPROVAL_REJECTED,
                detail=request.status_reason,
                finished_at=now,
            )
        elif request.status == ApprovalStatus.APPROVED:
            _resume_after_approval(run, request, now)
        elif request.status == ApprovalStatus.PENDING and now >= request.expires_at:
            _reopen_approval(run, Outcome.APPROVAL_EXPIRED, now)
        elif request.status == ApprovalStatus.PENDING:
            _note_refused_decision(run, request)
        return run.state


def _resume_after_approval(run: Run, request: ApprovalRequest, now: datetime) -> None:
    checkpoint = run.checkpoints.order_by("-sequence").first()
    _move(run, "approve", stage=Stage("approve"), stage_outcome="approved")
    _audit(
        run,
        "run.resumed",
        from_state=State.APPROVAL_REQUIRED,
        reason="approval",
        approval_request=request.pk,
        checkpoint=checkpoint.sequence if checkpoint else None,
    )
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)


def _note_refused_decision(run: Run, request: ApprovalRequest) -> None:
    latest = request.decisions.order_by("-created_at", "-pk").first()
    if latest is None or latest.counted or run.outcome == latest.refusal:
        return
    _move(run, "refuse_approval", outcome=latest.refusal)


def _reopen_approval(run: Run, refusal: str, now: datetime) -> None:
    request = _latest_request(run)
    if request is not None and request.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
        approvals.approval_invalidate(request=request, refusal=refusal, now=now)
    transition = "invalidate_approval" if run.state == State.APPROVED else "refuse_approval"
    _move(run, transition, outcome=refusal)
    _open_approval(run, now)


def _step_execute_approved(run_id: int, now: datetime) -> str | None:
    """Resume after approval: re-check the approval against the run as it is now."""
    with transaction.atomic():
        run = _lock_run(run_id)
        if run is None or run.state != State.APPROVED:
            return None
        request = (
            run.approvals.filter(status=ApprovalStatus.APPROVED, consumed_at__isnull=True)
            .order_by("-decided_at")
            .first()
        )
        if request is None:
            _reopen_approval(run, Outcome.APPROVAL_STALE, now)
            return run.state
        refusal = approvals.binding_refusal(request=request, binding=_binding(run), now=now)
        if refusal is not None:
            _reopen_approval(run, refusal, now)
            return run.state
        _checkpoint(run, {"approval_request": request.pk, "binding": _binding(run)})
        _move(run, "execute_approved", stage=Stage("execute"), stage_outcome="authorized")
        approvals.approval_consume(request=request, now=now)
        _write_effect(
            run,
            authorization={"policy_version": run.policy_version, "approval_request": request.pk},
        )
        return run.state


def _step_executing(run_id: int, now: datetime) -> str | None:
    """A run in `executing` whose effect message was lost: nudge the effect again."""
    for effect_id in Effect.objects.filter(
        run_id=run_id, status__in=[EffectStatus.PENDING, EffectStatus.RETRY_WAIT]
    ).values_list("pk", flat=True):
        effect_deliver(effect_id=effect_id, now=now)
    return None


_STEPS = {
    State.RECEIVED: _step_validate,
    State.VALIDATED: _step_normalize,
    State.NORMALIZED: _step_enrich,
    State.ENRICHED: _step_classify,
    State.CLASSIFIED: _step_decide,
    State.APPROVAL_REQUIRED: _step_await_approval,
    State.APPROVED: _step_execute_approved,
    State.EXECUTING: _step_executing,
}


# --- effects ---------------------------------------------------------------------------


def effect_deliver(*, effect_id: int, now: datetime | None = None) -> str | None:
    """Deliver one outbox row and complete its run, all in one transaction (local adapters)."""
    now = now or timezone.now()
    with transaction.atomic():
        # SKIP LOCKED: a duplicated message for a row being delivered right now does nothing.
        effect = (
            Effect.objects.select_for_update(
                skip_locked=connection.features.has_select_for_update_skip_locked
            )
            .filter(pk=effect_id, status__in=[EffectStatus.PENDING, EffectStatus.RETRY_WAIT])
            .first()
        )
        if effect is None:
            return None
        run = _lock_run(effect.run_id, wait=True)  # we hold the effect: finish the delivery
        if run is None or run.state != State.EXECUTING:
            return None
        stage = Stage("execute", attempt=effect.attempts + 1)
        effect.response_ref = get_adapter(effect.name).deliver(effect)
        effect.status = EffectStatus.DELIVERED
        effect.attempts += 1
        effect.delivered_at = now
        effect.save(update_fields=["response_ref", "status", "attempts", "delivered_at"])
        stage.record(run, "delivered")
        _move(
            run,
            "complete",
            stage=Stage("complete"),
            checkpoint={"effect": effect.pk, "response_ref": effect.response_ref},
            finished_at=now,
        )
        return effect.status


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
    return request.binding() == _binding(run) and counted.count() >= rule.approvers


# --- operator operations ----------------------------------------------------------------


def checkpoint_import(
    *, run_id: int, classification: Any, actor_label: str, actor: User | None = None
) -> Checkpoint:
    """Store an authored classification as a checkpoint to resume from (validated on resume)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        checkpoint = _checkpoint(run, {"classification": classification}, source="import")
        _audit(
            run,
            "checkpoint.imported",
            actor=actor,
            actor_label=actor_label,
            from_state=run.state,
            checkpoint=checkpoint.sequence,
        )
        return checkpoint


def run_resume(*, run_id: int, actor_label: str, actor: User | None = None) -> str:
    """Continue from the latest checkpoint, revalidating what it holds before using it."""
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("channel").get(pk=run_id)
        checkpoint = run.checkpoints.order_by("-sequence").first()
        stored = (checkpoint.data if checkpoint else {}).get("classification")
        if run.state not in (State.ENRICHED, State.NEEDS_REVIEW) or stored is None:
            return _refuse(run, "resume", actor, actor_label)
        stage = Stage("classify", attempt=run.classify_attempts)
        try:
            decision = ClassifierDecision.model_validate(stored)
        except ValidationError as exc:
            problems = validation_problems(exc)
            if run.state == State.NEEDS_REVIEW:
                return run.outcome
            _move(
                run,
                "hold",
                stage=stage,
                stage_outcome=Outcome.CLASSIFICATION_INVALID,
                actor=actor,
                outcome=Outcome.CLASSIFICATION_INVALID,
                field=problems[0].field,
                detail=json.dumps([p.model_dump() for p in problems]),
            )
            return Outcome.CLASSIFICATION_INVALID
        _move(
            run,
            "classify",
            stage=stage,
            stage_outcome="resumed",
            actor=actor,
            decision=decision.model_dump(mode="json"),
        )
        _audit(
            run,
            "run.resumed",
            actor=actor,
            actor_label=actor_label,
            from_state=State.ENRICHED,
            reason="checkpoint",
            checkpoint=checkpoint.sequence if checkpoint else None,
        )
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def run_reconsider(*, run_id: int, user: User, reason: str) -> str:
    """Decide a waiting run again under the policy active now; its approval goes stale."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if not any(t.name == "reconsider" for t in run.get_available_state_transitions()):
            return _refuse(run, "reconsider", user, SYSTEM, reason=reason)
        if not has_transition_perm(run.reconsider, user):
            raise PermissionDenied("you may not re-decide runs")
        now = timezone.now()
        open_requests = run.approvals.filter(
            status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED], consumed_at__isnull=True
        )
        for request in open_requests:
            approvals.approval_invalidate(request=request, refusal=Outcome.APPROVAL_STALE, now=now)
        _move(run, "reconsider", actor=user, note={"reason": reason})
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


# Operations a person can start from the run's admin page, by transition name.
OPERATIONS = {"reconsider": run_reconsider}


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


def run_move(
    *,
    run_id: int,
    target: str,
    reason: str,
    actor_label: str,
    actor: User | None = None,
) -> str:
    """A person asks for a run to reach `target` now.

    The state machine stays the only authority: a target that no transition reaches from the
    current state is refused and recorded (`state_conflict`), the run untouched. A reachable
    one is handed to the pipeline, which makes the move with all its own checks.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        reachable = {t.target for t in run.get_available_state_transitions()}
        if target not in reachable:
            return _refuse(run, f"move to {target}", actor, actor_label, reason=reason)
        _audit(
            run,
            "run.nudged",
            actor=actor,
            actor_label=actor_label,
            from_state=run.state,
            requested=target,
            reason=reason,
        )
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return "queued"


def _refuse(run: Run, what: str, actor: User | None, actor_label: str, **data: Any) -> str:
    """Record a refused transition; the run itself is left exactly as it was."""
    _audit(
        run,
        "transition.refused",
        actor=actor,
        actor_label=actor_label,
        from_state=run.state,
        outcome=Outcome.STATE_CONFLICT,
        requested=what,
        **data,
    )
    log.debug("refused %s on run %s in state %s", what, run.pk, run.state)
    return Outcome.STATE_CONFLICT


# --- the sweep ---------------------------------------------------------------------------


def sweep_due(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """Find work a lost message would otherwise leave behind, and nudge it again."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=setting("STAGE_LEASE_SECONDS"))
    due_runs = list(
        Run.objects.filter(state__in=_STEPS.keys())
        .exclude(state=State.APPROVAL_REQUIRED)
        .filter(updated_at__lte=stale)
        .exclude(next_attempt_at__gt=now)
        .values_list("pk", flat=True)[:limit]
    )
    # A decision committed but its message was lost (a worker restarted): the request is
    # closed more recently than the run last moved.
    decided = ApprovalRequest.objects.filter(
        run=OuterRef("pk"),
        status__in=[ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED],
        decided_at__gte=OuterRef("updated_at"),
    )
    due_runs += list(
        Run.objects.filter(state=State.APPROVAL_REQUIRED)
        .filter(Exists(decided))
        .values_list("pk", flat=True)[:limit]
    )
    retries = list(
        Run.objects.filter(state=State.ENRICHED, next_attempt_at__lte=now)
        .exclude(pk__in=due_runs)
        .values_list("pk", flat=True)[:limit]
    )
    effects = list(
        Effect.objects.filter(status__in=[EffectStatus.PENDING, EffectStatus.RETRY_WAIT])
        .filter(created_at__lte=stale)
        .values_list("pk", flat=True)[:limit]
    )
    with transaction.atomic():
        for run_id in [*due_runs, *retries]:
            enqueue_after_commit(ADVANCE_RUN_TASK, run_id)
        for effect_id in effects:
            enqueue_after_commit(DELIVER_EFFECT_TASK, effect_id)
    approvals_done = approvals.approvals_sweep(now=now, limit=limit)
    return {"runs": len(due_runs) + len(retries), "effects": len(effects), **approvals_done}
