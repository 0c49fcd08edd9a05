"""The pipeline, one step per call: validate, normalize, enrich, classify, decide, approve.

Each step locks the run, checks its state, makes one transition and commits it with its stage
record, checkpoint and audit row; the next step is enqueued after commit. A message that
arrives twice or late finds the state moved on and does nothing.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from approvals import services as approvals
from approvals.models import ApprovalRequest, ApprovalStatus
from automation.classifiers import (
    ClassifierInput,
    ClassifierTimeout,
    ClassifierUnavailable,
    get_classifier,
)
from automation.conf import setting
from automation.customers import customer_find, customers_known
from automation.extraction import extraction_problems
from automation.models import (
    ClassificationAttempt,
    Effect,
    EffectStatus,
    Outcome,
    Run,
    State,
)
from automation.schemas import (
    ClassifierDecision,
    FieldProblem,
    event_of,
    event_text,
    fingerprint,
    is_mail,
    validation_problems,
)
from automation.services.effects import effect_budget, effect_deliver
from automation.services.records import (
    ADVANCE_RUN_TASK,
    DELIVER_EFFECT_TASK,
    Stage,
    add_checkpoint,
    backoff_delay,
    binding_of,
    decided_policy_of,
    effect_key,
    effect_payload_of,
    facts_of,
    interpretation_of,
    lock_run,
    move,
    policy_for,
    record_audit,
    versions_of,
)
from config.dispatch import enqueue_after_commit
from policy.evaluation import Verdict, evaluate

# --- the pipeline: one step per call ------------------------------------------------------


def run_advance(*, run_id: int, now: datetime | None = None) -> str | None:
    """Take the run's next step if one is due. Returns the state reached, or None if idle."""
    run = Run.objects.filter(pk=run_id).only("state").first()
    if run is None:
        return None
    step = STEPS.get(run.state)
    if step is None:
        return None
    return step(run_id, now or timezone.now())


def _step_validate(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = lock_run(run_id)
        if run is None or run.state != State.RECEIVED:
            return None
        event = event_of(run.normalized or {})  # stored after admission: re-check
        move(run, "validate", stage=Stage("validate"), event_id=event.event_id)
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def _step_normalize(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = lock_run(run_id)
        if run is None or run.state != State.VALIDATED:
            return None
        normalized = event_of(run.normalized or {}).normalized()
        move(
            run,
            "normalize",
            stage=Stage("normalize"),
            normalized=normalized,
            fingerprint=fingerprint(normalized),
        )
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def _step_enrich(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = lock_run(run_id)
        if run is None or run.state != State.NORMALIZED:
            return None
        enrichment = _enrichment(run)
        move(
            run,
            "enrich",
            stage=Stage("enrich"),
            checkpoint={"enrichment": enrichment},
            enrichment=enrichment,
        )
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
        return run.state


def _enrichment(run: Run) -> dict[str, Any]:
    """Deterministic local evidence: the known customer, its tier, the open work beside it."""
    normalized = run.normalized or {}
    unfinished = Run.objects.exclude(
        state__in=[State.COMPLETED, State.BLOCKED, State.FAILED]
    ).exclude(pk=run.pk)
    match = customer_find(text=event_text(normalized), sender=normalized.get("sender", ""))
    enrichment: dict[str, Any] = match.as_enrichment()
    if match.customer is not None:
        enrichment["open_runs_same_customer"] = unfinished.filter(
            enrichment__customer__reference=match.customer.reference
        ).count()
    if is_mail(normalized):
        tier = match.customer.account_tier if match.customer is not None else "standard"
        enrichment["sender"] = normalized.get("sender")
        enrichment["thread_parent"] = run.thread_parent_id
    else:
        tier = normalized["account_tier"]
        enrichment["open_runs_same_request_type"] = unfinished.filter(
            channel=run.channel, normalized__request_type=normalized["request_type"]
        ).count()
    enrichment["account_tier"] = tier
    enrichment["priority_account"] = tier == "priority"
    return enrichment


def _claim_classifier_attempt(run_id: int, now: datetime) -> tuple[Run, int] | None:
    """Take the lease on one classifier call; the call itself happens outside any transaction."""
    with transaction.atomic():
        run = lock_run(run_id)
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
        run = lock_run(run_id, wait=True)
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
            move(
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
    if not isinstance(raw, dict):
        shown = raw if isinstance(raw, str) else type(raw).__name__
        problem = FieldProblem(field="output", message=f"is not a JSON object: {shown!r:.200}")
        return "invalid", None, [problem]
    try:
        return "valid", ClassifierDecision.model_validate(raw), []
    except ValidationError as exc:
        return "invalid", None, validation_problems(exc)


def _classifier_failed(run: Run, stage: Stage, error: Exception, now: datetime) -> None:
    error_class = type(error).__name__
    if run.classify_attempts - run.classify_attempts_spent >= run.channel.max_classifier_attempts:
        stage.record(run, Outcome.RETRY_EXHAUSTED, error_class)
        move(
            run,
            "hold",
            outcome=Outcome.RETRY_EXHAUSTED,
            field="classifier",
            detail=f"{run.classify_attempts} attempts, last: {error}",
        )
        return
    stage.record(run, "retry_scheduled", error_class)
    delay = backoff_delay(run.classify_attempts - run.classify_attempts_spent)
    move(
        run,
        "schedule_classifier_retry",
        next_attempt_at=now + timedelta(seconds=delay),
    )


def _accept_classification(run: Run, stage: Stage, decision: ClassifierDecision) -> None:
    payload = decision.model_dump(mode="json")
    problems = extraction_problems(payload["fields"], known_customers=customers_known)
    if problems:
        move(
            run,
            "hold",
            stage=stage,
            stage_outcome=Outcome.EXTRACTION_INVALID,
            outcome=Outcome.EXTRACTION_INVALID,
            field=problems[0].field,
            detail=json.dumps([p.model_dump() for p in problems]),
        )
        return
    move(
        run,
        "classify",
        stage=stage,
        checkpoint={"classification": payload},
        decision=payload,
    )
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)


def _step_decide(run_id: int, now: datetime) -> str | None:
    with transaction.atomic():
        run = lock_run(run_id)
        if run is None or run.state != State.CLASSIFIED:
            return None
        stage = Stage("decide")
        policy = policy_for(run)
        classification = run.classification or {}
        decision = evaluate(
            policy.parsed,
            facts_of(run),
            interpretation_of(classification),
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
        move(
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
        move(
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
        move(
            run,
            "hold",
            stage=stage,
            stage_outcome=Outcome.LOW_CONFIDENCE,
            outcome=Outcome.LOW_CONFIDENCE,
            field="confidence",
            detail="; ".join(r["text"] for r in decided["rules"] if not r["passed"]),
        )
    elif verdict == Verdict.APPROVE:
        move(
            run,
            "require_approval",
            stage=stage,
            stage_outcome="approval_required",
            checkpoint={"decision": decided},
            decided=decided,
        )
        _open_approval(run, now)
    else:
        move(
            run,
            "execute",
            stage=stage,
            stage_outcome="authorized",
            checkpoint={"decision": decided},
            decided=decided,
        )
        _write_effect(run, authorization={"policy_version": run.policy_version})


def _open_approval(run: Run, now: datetime) -> ApprovalRequest:
    document = decided_policy_of(run).parsed
    # The effect's own approval rule, or (an amount over its tier's limit) the amount rule.
    rule = document.approvals.get(run.effect_name) or document.amount_approval
    if rule is None:
        raise ValueError(f"policy {document.version} names no approver for run {run.pk}")
    classification = run.classification or {}
    evidence = {
        "classification": classification,
        "reason_code": run.reason_code,
        "confidence": run.confidence,
        "rules": [r for r in run.rules if r["rule_id"].startswith("approval.")],
        "versions": versions_of(run),
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
        binding=binding_of(run),
        effect_payload=effect_payload_of(run),
        evidence=evidence,
        rule=rule,
        now=now,
    )


def _write_effect(run: Run, *, authorization: dict[str, Any]) -> Effect:
    """Write the outbox row in the transaction that moved the run to executing."""
    now = timezone.now()
    attempts, deadline = effect_budget(run.effect_name, now)
    effect, created = Effect.objects.select_for_update().get_or_create(
        idempotency_key=effect_key(
            channel=run.channel.name, fingerprint=run.fingerprint, effect=run.effect_name
        ),
        defaults={
            "run": run,
            "name": run.effect_name,
            "payload": effect_payload_of(run),
            "authorization": authorization,
            "attempt_limit": attempts,
            "deadline_at": deadline,
        },
    )
    if not created and effect.run_id != run.pk:
        return _reach_existing_effect(run, effect, authorization, now)
    enqueue_after_commit(DELIVER_EFFECT_TASK, effect.pk)
    return effect


def _reach_existing_effect(
    run: Run, effect: Effect, authorization: dict[str, Any], now: datetime
) -> Effect:
    """A replay reached an effect key that already has a row: never a second effect.

    Delivered: the replay completes without sending anything. Not delivered (rejected,
    uncertain, held): the replay takes the row over, same key, with a fresh budget.
    """
    if effect.status == EffectStatus.DELIVERED:
        move(
            run,
            "complete",
            stage=Stage("execute"),
            stage_outcome="already_delivered",
            checkpoint={"effect": effect.pk, "already_delivered": True},
            finished_at=now,
        )
        return effect
    previous = effect.run_id
    attempts, effect.deadline_at = effect_budget(effect.name, now)
    effect.run = run
    effect.authorization = authorization
    effect.status = EffectStatus.RETRY_WAIT
    effect.attempt_limit = effect.attempts + attempts
    effect.next_attempt_at = now
    effect.lease_expires_at = None
    effect.save()
    record_audit(run, "effect.adopted", effect=effect.pk, from_run=previous)
    enqueue_after_commit(DELIVER_EFFECT_TASK, effect.pk)
    return effect


def _latest_request(run: Run) -> ApprovalRequest | None:
    return run.approvals.order_by("-created_at", "-pk").first()


def _step_await_approval(run_id: int, now: datetime) -> str | None:
    """A decision arrived (or a request lapsed): act on the run's latest approval request."""
    with transaction.atomic():
        run = lock_run(run_id)
        if run is None or run.state != State.APPROVAL_REQUIRED:
            return None
        request = _latest_request(run)
        if request is None or request.status == ApprovalStatus.EXPIRED:
            _reopen_approval(run, Outcome.APPROVAL_EXPIRED, now)
        elif request.status == ApprovalStatus.REJECTED:
            move(
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
    move(run, "approve", stage=Stage("approve"), stage_outcome="approved")
    record_audit(
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
    move(run, "refuse_approval", outcome=latest.refusal)


def _reopen_approval(run: Run, refusal: str, now: datetime) -> None:
    request = _latest_request(run)
    if request is not None and request.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
        approvals.approval_invalidate(request=request, refusal=refusal, now=now)
    transition = "invalidate_approval" if run.state == State.APPROVED else "refuse_approval"
    move(run, transition, outcome=refusal)
    _open_approval(run, now)


def _step_execute_approved(run_id: int, now: datetime) -> str | None:
    """Resume after approval: re-check the approval against the run as it is now."""
    with transaction.atomic():
        run = lock_run(run_id)
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
        refusal = approvals.binding_refusal(request=request, binding=binding_of(run), now=now)
        if refusal is not None:
            _reopen_approval(run, refusal, now)
            return run.state
        add_checkpoint(run, {"approval_request": request.pk, "binding": binding_of(run)})
        move(run, "execute_approved", stage=Stage("execute"), stage_outcome="authorized")
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


STEPS = {
    State.RECEIVED: _step_validate,
    State.VALIDATED: _step_normalize,
    State.NORMALIZED: _step_enrich,
    State.ENRICHED: _step_classify,
    State.CLASSIFIED: _step_decide,
    State.APPROVAL_REQUIRED: _step_await_approval,
    State.APPROVED: _step_execute_approved,
    State.EXECUTING: _step_executing,
}
