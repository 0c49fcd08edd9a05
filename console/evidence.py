"""The approver's evidence page of one request: everything it shows, read by one call.

What the request was decided against comes from approvals (its snapshot, who may decide it,
its SLA, the delegations and the people it may be given to), its run's comment thread from
automation, and what a decision did next in the console's words: so the page's reading lives
here, above both, and the view only checks access, calls `evidence_page` and renders.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from approvals import selectors
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus, Delegation
from audit.models import AuditEvent
from automation.models import Run, StageRecord, State
from automation.runs.comments import may_comment
from automation.runs.selectors import ShownComment, comment_thread
from console import vocabulary
from console.refusals import not_yours_text


@dataclass(frozen=True)
class AfterDecision:
    """What a decided request did to its run, and whether that is still being done (the
    evidence page then reloads itself until it is)."""

    text: str
    pending: bool


# Where a run stands while the work a decision started is still being done.
STILL_WORKING = frozenset({State.APPROVAL_REQUIRED, State.APPROVED, State.EXECUTING})


def after_decision(approval: ApprovalRequest, run: Run) -> AfterDecision | None:
    """What the decision did and what happens next, in words (None while it is undecided)."""
    if approval.status == ApprovalStatus.SENT_BACK:
        if run.state == State.APPROVAL_REQUIRED:
            return AfterDecision("Sent back: the run is going to the ops team's queue.", True)
        return AfterDecision(
            "Sent back: the ops team corrects the reading; a corrected run asks for a fresh "
            "approval.",
            False,
        )
    if approval.status == ApprovalStatus.REJECTED:
        if run.state in STILL_WORKING:
            return AfterDecision("Rejected: the run is being stopped; nothing will be done.", True)
        return AfterDecision("Rejected: the run stopped and nothing was done.", False)
    if approval.status != ApprovalStatus.APPROVED:
        return None
    doing, done = vocabulary.effect_progress(approval.effect)
    if run.state in STILL_WORKING:
        return AfterDecision(f"Approved: {doing}.", True)
    if run.state == State.COMPLETED:
        return AfterDecision(f"Approved: {done}. The run is done.", False)
    held = vocabulary.label("outcome", run.outcome)
    if run.state == State.NEEDS_REVIEW:
        return AfterDecision(
            f"Approved, but it could not be done yet: the run is held as “{held}” for the "
            "ops team, who retry or resolve it.",
            False,
        )
    ended = vocabulary.label("state", run.state)
    return AfterDecision(f"Approved, but the run ended as “{ended}” ({held}).", False)


@dataclass(frozen=True)
class EvidencePage:
    """Everything the evidence page shows of one request, for one person."""

    approval: ApprovalRequest
    run: Run
    now: datetime
    sla: str
    can_decide: bool
    after: AfterDecision | None
    not_yours: str  # why this person cannot decide it, in words ("" when they can)
    comments: list[ShownComment]
    may_comment: bool
    assignable: list[User]  # whom a lead may give it to (none for anyone else)
    may_claim: bool
    delegations: list[Delegation]
    # What the request was decided against (approvals.selectors.evidence).
    title_subject: str
    mail: dict[str, Any] | None
    attachments: list[tuple[dict[str, Any], list[tuple[str, bool]]]]
    customer: dict[str, Any] | None
    customer_matched_by: str | None
    account_tier: str | None
    fields: list[tuple[str, dict[str, Any]]]
    subject: list[tuple[str, bool]]
    body: list[tuple[str, bool]]
    classification: dict[str, Any]
    required_by: list[dict[str, Any]]  # the rules that asked for the approval
    all_rules: list[dict[str, Any]]  # every rule the run's decision applied
    versions: dict[str, Any]
    stages: list[StageRecord]
    history: list[AuditEvent]
    decisions: list[ApprovalDecision]
    earlier_requests: list[ApprovalRequest]

    def context(self) -> dict[str, Any]:
        """The page as its template's names: each field by its own name."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def evidence_page(*, approval: ApprovalRequest, user: User) -> EvidencePage:
    """The evidence page of a request this person may see (`approvals.selectors.request_for`
    read it, with its run and decisions)."""
    now = timezone.now()
    conflicted = bool(selectors.conflicted_request_ids(user, [approval]))
    can_decide = selectors.can_decide(user, approval, conflicted=conflicted)
    return EvidencePage(
        approval=approval,
        run=approval.run,
        now=now,
        sla=selectors.sla_state(approval, now),
        can_decide=can_decide,
        after=after_decision(approval, approval.run),
        not_yours="" if can_decide else not_yours_words(user, approval),
        comments=comment_thread(approval.run_id),
        may_comment=may_comment(user, approval.run_id),
        assignable=_assignable(user, approval),
        may_claim=can_decide and approval.assignee_id != user.pk,
        delegations=selectors.delegations_touching(approval) if approval.is_pending else [],
        **selectors.evidence(approval),
    )


def not_yours_words(user: User, approval: ApprovalRequest) -> str:
    """Why this person cannot decide this request, in words ('' when nothing is left to
    decide)."""
    reason = selectors.not_yours(user, approval)
    return not_yours_text(reason, approval) if reason is not None else ""


def _assignable(user: User, approval: ApprovalRequest) -> list[User]:
    if approval.is_pending and user.has_perm("approvals.assign_approvalrequest"):
        return selectors.assignable_people(approval)
    return []
