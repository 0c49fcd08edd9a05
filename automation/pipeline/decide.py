"""The pipeline's second part: a classified run decided against its policy, and the
approval a decision may ask for (opened, awaited, re-checked when it comes back).

A decision that executes writes its effect through automation/pipeline/execute.py. Composed by
automation/pipeline/services.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from approvals import services as approvals
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.selectors import run_conflicted_user_ids
from audit.models import AuditAction
from automation.classifiers.models import LabelSource
from automation.classifiers.quality import label_record, qa_review_open, reading_of
from automation.pipeline.classify import hold_with_problems
from automation.pipeline.execute import deliver_written, effect_write
from automation.runs.journal import (
    Stage,
    add_checkpoint,
    record_audit,
    record_transition,
    versions_of,
)
from automation.runs.models import Run, StageName, StageOutcome, State
from automation.runs.payloads import (
    binding_of,
    decided_policy_of,
    decision_of,
    effect_payload_of,
    policy_for,
)
from automation.runs.sendable import effect_problems
from core.codes import Outcome
from policy.catalogue import Catalogue
from policy.evaluation import Verdict, approval_for, qa_sample


def step_decide(run: Run, now: datetime) -> bool:
    stage = Stage(StageName.DECIDE)
    policy = policy_for(run)
    decision = decision_of(run, policy.parsed)
    decided = {
        "policy_version": policy.name,
        "verdict": decision.verdict.value,
        "route": decision.route,
        "effect": decision.effect,
        "rules": [r.as_dict() for r in decision.rules],
    }
    if decision.verdict == Verdict.EXECUTE:
        # Sampled for a person's review after the fact; the effect goes ahead all the same.
        group = qa_sample(policy.parsed, decision.route or "", run.fingerprint)
        if group is not None:
            decided["qa_sample"] = group
    _apply_decision(run, stage, decision.verdict, decided, now, policy.parsed.business)
    return True


def _apply_decision(
    run: Run,
    stage: Stage,
    verdict: Verdict,
    decided: dict[str, Any],
    now: datetime,
    business: Catalogue,
) -> None:
    if verdict in (Verdict.APPROVE, Verdict.EXECUTE) and _unsendable(run, stage, decided, business):
        return
    if verdict == Verdict.BLOCK:
        record_transition(
            run,
            run.block,
            stage=stage,
            stage_outcome=StageOutcome.POLICY_BLOCK,
            checkpoint={"decision": decided},
            decided=decided,
            finished_at=now,
            save=False,
        )
    elif verdict == Verdict.UNSUPPORTED:
        record_transition(
            run,
            run.fail,
            stage=stage,
            stage_outcome=StageOutcome.UNSUPPORTED_REQUEST,
            checkpoint={"decision": decided},
            outcome=Outcome.UNSUPPORTED_REQUEST,
            field="requested_action",
            rules=decided["rules"],
            finished_at=now,
            save=False,
        )
    elif verdict == Verdict.LOW_CONFIDENCE:
        refused = [r for r in decided["rules"] if not r["passed"]]
        _hold_decided(run, stage, Outcome.LOW_CONFIDENCE, decided, refused, field="confidence")
    elif verdict == Verdict.RISK_SIGNAL:
        _hold_decided(run, stage, Outcome.RISK_SIGNAL, decided, _signals(decided))
    elif verdict == Verdict.APPROVE:
        record_transition(
            run,
            run.require_approval,
            stage=stage,
            # A signal's approval is a hand-off of its own in the reports.
            stage_outcome=(
                StageOutcome.RISK_SIGNAL if _signals(decided) else StageOutcome.APPROVAL_REQUIRED
            ),
            checkpoint={"decision": decided},
            decided=decided,
            save=False,
        )
        _open_approval(run, now)
    else:
        record_transition(
            run,
            run.execute,
            stage=stage,
            stage_outcome=StageOutcome.AUTHORIZED,
            checkpoint={"decision": decided},
            decided=decided,
            save=False,
        )
        if "qa_sample" in decided:
            qa_review_open(run, group=decided["qa_sample"], decided=decided)
        authorization = {"policy_version": run.policy_version}
        effect = effect_write(run, authorization=authorization, now=now, business=business)
        if effect is not None:
            deliver_written(run, effect, now, business)


def _unsendable(run: Run, stage: Stage, decided: dict[str, Any], business: Catalogue) -> bool:
    """Hold a run whose effect could not be written as read, before anyone is asked to approve
    it or anything is sent: the parameters named, for a person to correct."""
    problems = effect_problems(business, decided["effect"] or "", run, run.classification or {})
    if problems:
        hold_with_problems(run, stage, Outcome.EXTRACTION_INVALID, problems, decided)
    return bool(problems)


def _hold_decided(
    run: Run,
    stage: Stage,
    outcome: Outcome,
    decided: dict[str, Any],
    why: list[dict[str, Any]],
    field: str = "",
) -> None:
    """Hold a decided run for a person, in the queue the outcome names, with the rules why."""
    record_transition(
        run,
        run.hold,
        stage=stage,
        stage_outcome=StageOutcome(outcome.value),
        outcome=outcome,
        field=field,
        detail="; ".join(r["text"] for r in why),
        decided=decided,
        save=False,
    )


def _signals(decided: dict[str, Any]) -> list[dict[str, Any]]:
    """The signal rules that hold or stop the run (a hold a person read has passed)."""
    return [r for r in decided["rules"] if r["rule_id"].startswith("signal.") and not r["passed"]]


def _open_approval(run: Run, now: datetime) -> ApprovalRequest:
    document = decided_policy_of(run).parsed
    # The effect's own approvers, the amount approvers or a signal's: as the decision said.
    rule = approval_for(document, run.effect_name, run.rules)
    classification = run.classification or {}
    evidence = {
        "classification": classification,
        "reason_code": run.reason_code,
        "confidence": run.confidence,
        # What asked for a person: the effect's approval rule, an amount over its limit, a
        # risk signal (with the sentence it matched).
        "rules": [
            r
            for r in run.rules
            if r["rule_id"].startswith("approval.")
            or (not r["passed"] and r["rule_id"].startswith(("amount.", "signal.")))
        ],
        "versions": versions_of(run),
        # Whoever acted on this run, or a run it replays, by hand may not approve it: shown
        # with the request; the decision reads the trail again (approvals.selectors).
        "conflicted_user_ids": sorted(run_conflicted_user_ids(run.pk)),
    }
    return approvals.approval_request_open(
        run_id=run.pk,
        binding=binding_of(run),
        effect_payload=effect_payload_of(run, document.business),
        evidence=evidence,
        rule=rule,
        now=now,
    )


def _latest_request(run: Run) -> ApprovalRequest | None:
    return run.approvals.order_by("-created_at", "-pk").first()


def step_await_approval(run: Run, now: datetime) -> bool:
    """A decision arrived (or a request lapsed): act on the run's latest approval request."""
    request = _latest_request(run)
    if request is None or request.status == ApprovalStatus.EXPIRED:
        _reopen_approval(run, Outcome.APPROVAL_EXPIRED, now)
    elif request.status == ApprovalStatus.REJECTED:
        record_transition(
            run,
            run.fail,
            stage=Stage(StageName.APPROVE),
            stage_outcome=StageOutcome.APPROVAL_REJECTED,
            checkpoint={"approval_request": request.pk},
            outcome=Outcome.APPROVAL_REJECTED,
            detail=request.status_reason,
            finished_at=now,
            save=False,
        )
    elif request.status == ApprovalStatus.APPROVED:
        _resume_after_approval(run, request, now)
    elif request.status == ApprovalStatus.SENT_BACK:  # to the queue, for a correction
        record_transition(
            run,
            run.send_back,
            stage=Stage(StageName.APPROVE),
            stage_outcome=StageOutcome.SENT_BACK,
            checkpoint={"approval_request": request.pk},
            reason=request.status_reason,
            save=False,
        )
    elif request.status == ApprovalStatus.PENDING and now >= request.expires_at:
        _reopen_approval(run, Outcome.APPROVAL_EXPIRED, now)
    elif request.status == ApprovalStatus.PENDING:
        return _note_refused_decision(run, request)
    return True


def _resume_after_approval(run: Run, request: ApprovalRequest, now: datetime) -> None:
    checkpoint = run.checkpoints.order_by("-sequence").first()
    record_transition(
        run,
        run.approve,
        stage=Stage(StageName.APPROVE),
        stage_outcome=StageOutcome.APPROVED,
        save=False,
    )
    record_audit(
        run,
        AuditAction.RUN_RESUMED,
        from_state=State.APPROVAL_REQUIRED,
        reason="approval",
        approval_request=request.pk,
        checkpoint=checkpoint.sequence if checkpoint else None,
    )


def _note_refused_decision(run: Run, request: ApprovalRequest) -> bool:
    latest = request.decisions.order_by("-created_at", "-pk").first()
    if latest is None or latest.counted or run.outcome == latest.refusal:
        return False
    record_transition(run, run.refuse_approval, outcome=latest.refusal, save=False)
    return True


def _reopen_approval(run: Run, refusal: str, now: datetime) -> None:
    request = _latest_request(run)
    if request is not None and request.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
        approvals.approval_invalidate(request=request, refusal=refusal, now=now)
    transition = run.invalidate_approval if run.state == State.APPROVED else run.refuse_approval
    record_transition(run, transition, outcome=refusal, save=False)
    _open_approval(run, now)


def step_execute_approved(run: Run, now: datetime) -> bool:
    """Resume after approval: re-check the approval against the run as it is now."""
    request = (
        run.approvals.filter(status=ApprovalStatus.APPROVED, consumed_at__isnull=True)
        .order_by("-decided_at")
        .first()
    )
    if request is None:
        _reopen_approval(run, Outcome.APPROVAL_STALE, now)
        return True
    refusal = approvals.binding_refusal(request=request, binding=binding_of(run), now=now)
    if refusal is not None:
        _reopen_approval(run, refusal, now)
        return True
    add_checkpoint(run, {"approval_request": request.pk, "binding": binding_of(run).as_dict()})
    record_transition(
        run,
        run.execute_approved,
        stage=Stage(StageName.EXECUTE),
        stage_outcome=StageOutcome.AUTHORIZED,
        save=False,
    )
    approvals.approval_consume(request=request, now=now)
    reading = reading_of(run)
    for approver in request.decisions.filter(approve=True, counted=True).select_related("user"):
        # Approving the effect the reading proposed says the reading was right.
        label_record(
            run,
            source=LabelSource.APPROVAL,
            actor=approver.user,
            category=reading["category"],
            effect=reading["effect"],
        )
    business = decided_policy_of(run).parsed.business
    effect = effect_write(
        run,
        authorization={"policy_version": run.policy_version, "approval_request": request.pk},
        now=now,
        business=business,
    )
    if effect is not None:
        deliver_written(run, effect, now, business)
    return True
