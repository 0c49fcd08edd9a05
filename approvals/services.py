"""Approval use cases. A decision binds the exact input and versions the approver saw."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, Group, User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.binding import Binding
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus, Delegation
from approvals.selectors import (
    bulk_allowed,
    conflicted_user_ids,
    delegations,
    delegators_of,
    user_groups,
)
from audit.models import AuditAction
from audit.services import audit_record
from core.codes import Outcome, Refusal
from core.errors import ServiceError
from core.inputs import RANGE_MESSAGE, in_calendar
from core.limits import within
from policy.schemas import ApprovalRule
from worker.dispatch import Priority, enqueue_after_commit

# The run's next step, named by path: approvals does not import automation.
ADVANCE_RUN_TASK = "automation.tasks.advance_run"

RECORDED = "recorded"  # counted, but the request waits for another approver
DECIDE = "approvals.decide_approvalrequest"  # a role's permission (accounts.roles)


@dataclass(frozen=True)
class DecisionResult:
    code: str  # recorded, approved, rejected, approval_stale, approval_expired
    request: ApprovalRequest
    decision: ApprovalDecision


def approval_request_open(
    *,
    run_id: int,
    binding: Binding,
    effect_payload: dict[str, Any],
    evidence: dict[str, Any],
    rule: ApprovalRule,
    now: datetime,
) -> ApprovalRequest:
    """Open a request for one proposed effect. The caller owns the transaction (the run's)."""
    evidence = {**evidence, "bulk": rule.bulk}  # what policy allowed, with what it asked
    return ApprovalRequest.objects.create(
        run_id=run_id,
        effect=binding.effect,
        effect_payload=effect_payload,
        fingerprint=binding.fingerprint,
        workflow_version=binding.workflow_version,
        policy_version=binding.policy_version,
        evidence=evidence,
        group=rule.group,
        required_approvals=rule.approvers,
        expires_at=now + timedelta(hours=rule.expires_after_hours),
        escalate_at=now + timedelta(hours=rule.escalate_after_hours),
        escalate_to=rule.escalate_to or "",
    )


def binding_refusal(*, request: ApprovalRequest, binding: Binding, now: datetime) -> str | None:
    """Why this request can no longer authorise the run as it is now, or None if it can."""
    if now >= request.expires_at:
        return Outcome.APPROVAL_EXPIRED
    if request.binding() != binding:
        return Outcome.APPROVAL_STALE
    return None


def _may_decide(user: User | AnonymousUser, request: ApprovalRequest) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    if isinstance(user, AnonymousUser):
        return False
    if user.is_superuser:
        return True
    return bool(user_groups(user) & set(request.visible_groups()))  # with delegated groups


def _decides_through_a_team(user: User, request: ApprovalRequest) -> bool:
    """Whether a team that reaches this request for the person (their own, or one delegated
    to them) holds the right to decide: the permission of one team must not decide for
    another team the person is also in (a member of an approving team and of a team with no
    role decides only the approving team's requests)."""
    if user.is_superuser:
        return True
    if not user.has_perm(DECIDE):
        return False
    reached = user_groups(user) & set(request.visible_groups())
    return Group.objects.filter(
        name__in=reached,
        permissions__content_type__app_label="approvals",
        permissions__codename="decide_approvalrequest",
    ).exists()


def _on_behalf_of(user: User, request: ApprovalRequest) -> User | None:
    """Whom the person decides for: None in their own right (in the request's groups), else
    the one away whose approvals were delegated to them and whose group it is."""
    groups = set(request.visible_groups())
    if user.is_superuser or user.groups.filter(name__in=groups).exists():
        return None
    return (
        User.objects.filter(pk__in=delegators_of(user), groups__name__in=groups)
        .order_by("pk")
        .first()
    )


SEPARATION_OF_DUTIES = (
    "you acted on this run, or on a run it replays (corrected, retried, resumed, replayed "
    "or re-decided it), so someone else must decide it"
)


def _check_decidable(
    *,
    request: ApprovalRequest,
    user: User,
    approve: bool,
    comment: str,
    conflicted: set[int],
    on_behalf_of: User | None = None,
) -> None:
    if not _may_decide(user, request):
        raise ServiceError(Refusal.FORBIDDEN, f"you are not in the {request.group} group")
    if not _decides_through_a_team(user, request):
        # In the group, but no role of it decides: a team is named by a route or a rule
        # whatever its roles, and only the approver role (or the ops lead's) lets it decide.
        raise ServiceError(
            Refusal.FORBIDDEN, f"no role of the team {request.group} decides approvals"
        )
    if user.pk in conflicted:
        raise ServiceError(Refusal.SEPARATION_OF_DUTIES, SEPARATION_OF_DUTIES)
    if request.status in (ApprovalStatus.STALE, ApprovalStatus.EXPIRED):
        raise ServiceError(
            Refusal(f"approval_{request.status}"),
            f"this request is {request.status} ({request.status_reason}); "
            "a fresh request replaces it",
        )
    if request.status != ApprovalStatus.PENDING:
        raise ServiceError(Refusal.ALREADY_DECIDED, f"this request is already {request.status}")
    principal = on_behalf_of or user
    counted = request.decisions.filter(counted=True)
    if counted.filter(Q(user=principal) | Q(on_behalf_of=principal) | Q(user=user)).exists():
        raise ServiceError(
            Refusal.ALREADY_DECIDED,
            "you have already decided this request"
            if principal == user
            else f"{principal.get_username()}'s decision on this request is already given",
        )
    if on_behalf_of is not None and on_behalf_of.pk in conflicted:
        raise ServiceError(
            Refusal.SEPARATION_OF_DUTIES,
            f"{on_behalf_of.get_username()} acted on this run, so nobody decides it for them",
        )
    if not approve and not comment.strip():
        raise ServiceError(Refusal.COMMENT_REQUIRED, "a rejection needs a comment")
    within(comment, what="the comment")


@transaction.atomic(durable=True)
def approval_decide(
    *,
    request_id: int,
    user: User,
    approve: bool,
    comment: str = "",
    seen: Binding,
    now: datetime | None = None,
) -> DecisionResult:
    """Record a person's decision on what they saw. Stale or expired views authorise nothing.

    `seen` is the binding the person was shown: fingerprint, workflow and policy versions and
    the effect.
    """
    now = now or timezone.now()
    # Row lock: two approvers clicking at once decide one after the other, never both on
    # a request that the first one already completed.
    request = ApprovalRequest.objects.select_for_update().get(pk=request_id)
    # Read from the audit trail now, not when the request opened: an action taken since (on
    # this run or on one it replays) disqualifies its actor all the same.
    conflicted = conflicted_user_ids(request)
    on_behalf_of = _on_behalf_of(user, request) if _may_decide(user, request) else None
    _check_decidable(
        request=request,
        user=user,
        approve=approve,
        comment=comment,
        conflicted=conflicted,
        on_behalf_of=on_behalf_of,
    )
    refusal = binding_refusal(request=request, binding=seen, now=now)
    decision = ApprovalDecision.objects.create(
        request=request,
        user=user,
        on_behalf_of=on_behalf_of,
        approve=approve,
        comment=comment,
        seen_fingerprint=seen.fingerprint,
        seen_workflow_version=seen.workflow_version,
        seen_policy_version=seen.policy_version,
        seen_effect=seen.effect,
        counted=refusal is None,
        refusal=refusal or "",
    )
    if refusal == Outcome.APPROVAL_EXPIRED:
        request.expire(reason="expired before it was decided", now=now)
        _save_closed(request)
    if refusal is not None:
        enqueue_after_commit(ADVANCE_RUN_TASK, request.run_id, priority=Priority.URGENT)
        code = refusal
    else:
        code = _tally(request, approve, now, conflicted)
    behalf: dict[str, Any] = {} if on_behalf_of is None else {"on_behalf_of": on_behalf_of.pk}
    audit_record(
        action=AuditAction.APPROVAL_APPROVE if approve else AuditAction.APPROVAL_REJECT,
        actor=user,
        run_id=request.run_id,
        approval_id=request.pk,
        result=code,
        comment=comment,
        seen=seen.as_dict(),
        **behalf,
    )
    return DecisionResult(code, request, decision)


# A sent-back request keeps its reason as its status reason (shown with the run in its queue).
SEND_BACK_REASON_LIMIT = 200


@transaction.atomic(durable=True)
def approval_send_back(
    *, request_id: int, user: User, reason: str, now: datetime | None = None
) -> ApprovalRequest:
    """Close a pending request as sent back, neither approved nor rejected: its run goes to
    the queue for a person to correct its reading, and a corrected run asks for a fresh
    approval. Only someone who may decide the request may send it back, and only while it
    can still be decided (pending, not expired)."""
    now = now or timezone.now()
    # Row lock: a send back and a decision at once happen one after the other; the second
    # finds the request closed and is refused.
    request = ApprovalRequest.objects.select_for_update().get(pk=request_id)
    conflicted = conflicted_user_ids(request)
    on_behalf_of = _on_behalf_of(user, request) if _may_decide(user, request) else None
    reason = reason.strip()
    _check_decidable(
        request=request,
        user=user,
        approve=True,  # the reason is checked below, as a send back's
        comment=reason,
        conflicted=conflicted,
        on_behalf_of=on_behalf_of,
    )
    if not reason:
        raise ServiceError(Refusal.REASON_REQUIRED, "say what is wrong with the reading")
    within(reason, limit=SEND_BACK_REASON_LIMIT, what="the reason")
    if now >= request.expires_at:  # the sweep closes it; the run then asks afresh
        raise ServiceError(
            Refusal.APPROVAL_EXPIRED,
            "this request expired before it was decided; a fresh request replaces it",
        )
    request.send_back(reason=reason, now=now)
    _save_closed(request)
    behalf: dict[str, Any] = {} if on_behalf_of is None else {"on_behalf_of": on_behalf_of.pk}
    # An approval action, not a hand on the run: whoever sent it back may still approve the
    # corrected run (the person who corrects it may not).
    audit_record(
        action=AuditAction.APPROVAL_SENT_BACK,
        actor=user,
        run_id=request.run_id,
        approval_id=request.pk,
        result=ApprovalStatus.SENT_BACK.value,
        reason=reason,
        **behalf,
    )
    enqueue_after_commit(ADVANCE_RUN_TASK, request.run_id, priority=Priority.URGENT)
    return request


# --- several at once --------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkResult:
    request_id: int
    code: str  # approved, rejected, recorded, or why it was skipped (a refusal's code)
    message: str


def bulk_refusal(request: ApprovalRequest) -> str:
    """Why this request may not be decided with others ('' when it may)."""
    if not request.evidence.get("bulk"):
        return "policy asks for this effect's requests to be decided one at a time"
    if request.required_approvals > 1:
        return "it needs more than one approver"
    if not bulk_allowed(request):
        return "a risk signal sent it to a person"
    return ""


def approvals_decide_bulk(
    *,
    seen: dict[int, Binding],
    user: User,
    approve: bool,
    comment: str = "",
    now: datetime | None = None,
) -> list[BulkResult]:
    """Decide each request on what the person saw of it, each on its own (its own row lock and
    transaction): one that is no longer as it was shown (stale, expired, decided meanwhile) or
    that may not be decided with others is skipped and said, never decided."""
    results = []
    for request_id, binding in seen.items():
        now_ = now or timezone.now()
        request = ApprovalRequest.objects.filter(pk=request_id).first()
        if request is None:
            results.append(BulkResult(request_id, "missing", "no such request"))
            continue
        # The same rules for a rejection as for an approval: what policy asks to be decided
        # one at a time (or by more than one person) is never rejected in a batch either.
        why = bulk_refusal(request)
        stale = binding_refusal(request=request, binding=binding, now=now_)
        if why or stale:
            code = stale or Refusal.FORBIDDEN
            message = why or (
                "it changed since you saw it: decide it on its own page"
                if stale == Outcome.APPROVAL_STALE
                else "it expired"
            )
            results.append(BulkResult(request_id, str(code), f"skipped: {message}"))
            continue
        try:
            decided = approval_decide(
                request_id=request_id,
                user=user,
                approve=approve,
                comment=comment,
                seen=binding,
                now=now_,
            )
        except ServiceError as exc:
            results.append(BulkResult(request_id, str(exc.code), f"skipped: {exc.message}"))
            continue
        if decided.code in (Outcome.APPROVAL_STALE, Outcome.APPROVAL_EXPIRED):  # changed since
            results.append(
                BulkResult(request_id, decided.code, "skipped: it changed as it was decided")
            )
            continue
        results.append(BulkResult(request_id, decided.code, decided.code))
    return results


# --- delegation: someone decides for a person while they are away ---------------------------


@transaction.atomic(durable=True)
def delegation_give(
    *,
    delegator: User,
    delegate: User,
    starts_at: datetime,
    ends_at: datetime,
    reason: str,
    by: User,
) -> Delegation:
    """Let `delegate` decide `delegator`'s requests from `starts_at` to `ends_at`: given by
    the person themselves, or by a lead for them."""
    if by != delegator and not by.has_perm("approvals.assign_approvalrequest"):
        raise ServiceError(Refusal.FORBIDDEN, "only the person or a lead delegates approvals")
    if delegate == delegator:
        raise ServiceError(Refusal.BAD_ACTION, "choose someone else to decide for you")
    if not delegate.is_active or not delegate.has_perm(DECIDE):
        raise ServiceError(Refusal.FORBIDDEN, f"{delegate.get_username()} may not decide approvals")
    if not (in_calendar(starts_at) and in_calendar(ends_at)):
        # Stored, a window's end past year 9999 (in UTC) could not be read back: the pages
        # and the notify task that read delegations would fail for everyone.
        raise ServiceError(Refusal.BAD_ACTION, RANGE_MESSAGE)
    if ends_at <= starts_at:
        raise ServiceError(Refusal.BAD_ACTION, "the end must come after the start")
    within(reason, what="the reason")
    delegation = Delegation.objects.create(
        delegator=delegator,
        delegate=delegate,
        starts_at=starts_at,
        ends_at=ends_at,
        reason=reason[:200],
        created_by=by,
    )
    audit_record(
        action=AuditAction.DELEGATION_GIVEN,
        actor=by,
        delegation=delegation.pk,
        delegator=delegator.pk,
        delegate=delegate.pk,
        starts_at=starts_at.isoformat(),
        ends_at=ends_at.isoformat(),
    )
    return delegation


@transaction.atomic(durable=True)
def delegation_end(*, delegation_id: int, by: User, now: datetime) -> Delegation:
    """End a delegation now (it would have ended by itself at its end)."""
    delegation = delegations().select_for_update().get(pk=delegation_id)
    if by.pk not in (delegation.delegator_id, delegation.delegate_id) and not by.has_perm(
        "approvals.assign_approvalrequest"
    ):
        raise ServiceError(Refusal.FORBIDDEN, "only its two people or a lead end a delegation")
    if delegation.ended_early_at is None and delegation.ends_at > now:
        delegation.ended_early_at = now
        delegation.save(update_fields=["ended_early_at"])
        audit_record(action=AuditAction.DELEGATION_ENDED, actor=by, delegation=delegation.pk)
    return delegation


# --- who works on a request: claimed, assigned, released ------------------------------------


def _eligible(user: User, request: ApprovalRequest) -> None:
    """Refuse a person who could not decide the request: not in its groups, or someone who
    acted on the run (separation of duties holds through every hand-off)."""
    if not user.is_active or not _may_decide(user, request):
        raise ServiceError(
            Refusal.FORBIDDEN, f"{user.get_username()} is not in the {request.group} group"
        )
    if user.pk in conflicted_user_ids(request):
        raise ServiceError(
            Refusal.SEPARATION_OF_DUTIES,
            f"{user.get_username()} acted on this run, so someone else must decide it",
        )


def _pending(request_id: int) -> ApprovalRequest:
    request = ApprovalRequest.objects.select_for_update().get(pk=request_id)
    if request.status != ApprovalStatus.PENDING:
        raise ServiceError(Refusal.ALREADY_DECIDED, f"this request is already {request.status}")
    return request


@transaction.atomic(durable=True)
def approval_claim(*, request_id: int, user: User, now: datetime) -> ApprovalRequest:
    """Take a pending request up: the page and the inbox show it is yours."""
    request = _pending(request_id)
    _eligible(user, request)
    if request.assignee_id not in (None, user.pk):
        raise ServiceError(
            Refusal.ALREADY_DECIDED,
            "someone else has this request; a lead can give it to you",
        )
    return _hand_to(request, user, actor=user, action=AuditAction.APPROVAL_CLAIMED, now=now)


@transaction.atomic(durable=True)
def approval_assign(*, request_id: int, assignee: User, by: User, now: datetime) -> ApprovalRequest:
    """A lead gives a pending request to a member of its group (who is then told)."""
    if not by.has_perm("approvals.assign_approvalrequest"):
        raise ServiceError(Refusal.FORBIDDEN, "you may not give requests to people")
    request = _pending(request_id)
    _eligible(assignee, request)
    return _hand_to(request, assignee, actor=by, action=AuditAction.APPROVAL_ASSIGNED, now=now)


@transaction.atomic(durable=True)
def approval_release(*, request_id: int, user: User, now: datetime) -> ApprovalRequest:
    """Give a request back to its group: its holder, or a lead."""
    request = _pending(request_id)
    if request.assignee_id != user.pk and not user.has_perm("approvals.assign_approvalrequest"):
        raise ServiceError(Refusal.FORBIDDEN, "only its holder or a lead can give it back")
    if request.assignee_id is None:
        return request
    return _hand_to(request, None, actor=user, action=AuditAction.APPROVAL_RELEASED, now=now)


def _hand_to(
    request: ApprovalRequest,
    user: User | None,
    *,
    actor: User,
    action: AuditAction,
    now: datetime,
) -> ApprovalRequest:
    """Give the request to `user` (None: back to its group), on the record."""
    given: dict[str, Any] = {} if user is None else {"assignee": user.pk}
    audit_record(
        action=action,
        actor=actor,
        run_id=request.run_id,
        approval_id=request.pk,
        **given,
        previous=request.assignee_id,
    )
    request.assignee, request.assigned_at = user, None if user is None else now
    request.save(update_fields=["assignee", "assigned_at"])
    return request


def _tally(request: ApprovalRequest, approve: bool, now: datetime, conflicted: set[int]) -> str:
    # An approval given before its approver acted on the run no longer counts towards it.
    approvals = request.decisions.filter(counted=True, approve=True).exclude(user_id__in=conflicted)
    # One person counts once, whether they decided or someone decided for them.
    people = {
        behalf or user
        for user, behalf in approvals.values_list("user_id", "on_behalf_of_id")
        if behalf not in conflicted
    }
    if not approve:
        request.reject(now=now)
        _save_closed(request)
    elif len(people) >= request.required_approvals:
        request.approve(now=now)
        _save_closed(request)
    else:
        return RECORDED
    enqueue_after_commit(ADVANCE_RUN_TASK, request.run_id, priority=Priority.URGENT)
    return str(request.status)


def _save_closed(request: ApprovalRequest) -> None:
    """Save what a closing transition set."""
    request.save(update_fields=["status", "status_reason", "decided_at"])


def approval_invalidate(*, request: ApprovalRequest, refusal: str, now: datetime) -> None:
    """Mark a request that no longer matches its run (caller holds the run's lock)."""
    if refusal == Outcome.APPROVAL_EXPIRED:
        request.lapse(reason=refusal, now=now)
    else:
        request.go_stale(reason=refusal, now=now)
    _save_closed(request)


def approval_consume(*, request: ApprovalRequest, now: datetime) -> None:
    """An approval is used once: the run executed on it."""
    request.consumed_at = now
    request.save(update_fields=["consumed_at"])


# --- expiry and escalation (the scheduled sweep) ------------------------------------------


@transaction.atomic(durable=True)
def approval_expire(*, request_id: int, now: datetime) -> bool:
    """Close a pending request past its expiry; the run then waits for a fresh one."""
    request = ApprovalRequest.objects.select_for_update().filter(pk=request_id).first()
    if request is None or not request.is_pending or now < request.expires_at:
        return False  # decided meanwhile, or a late message
    request.expire(reason="expired without a decision", now=now)
    _save_closed(request)
    audit_record(
        action=AuditAction.APPROVAL_EXPIRED,
        run_id=request.run_id,
        approval_id=request.pk,
        expires_at=request.expires_at.isoformat(),
    )
    enqueue_after_commit(ADVANCE_RUN_TASK, request.run_id, priority=Priority.URGENT)
    return True


@transaction.atomic(durable=True)
def approval_escalate(*, request_id: int, now: datetime) -> bool:
    """Past its SLA, a pending request also goes to the group policy names for escalation."""
    request = ApprovalRequest.objects.select_for_update().filter(pk=request_id).first()
    if (
        request is None
        or not request.is_pending
        or request.escalated_at is not None
        or not request.escalate_to
        or now < request.escalate_at
    ):
        return False
    request.escalated_at = now
    request.save(update_fields=["escalated_at"])
    audit_record(
        action=AuditAction.APPROVAL_ESCALATED,
        run_id=request.run_id,
        approval_id=request.pk,
        to_group=request.escalate_to,
        from_group=request.group,
    )
    return True


def approvals_sweep(*, now: datetime, limit: int = 500) -> dict[str, int]:
    """Expire and escalate what is due. Each request is its own transaction."""
    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
    expiring = list(pending.filter(expires_at__lte=now).values_list("pk", flat=True)[:limit])
    escalating = list(
        pending.filter(escalate_at__lte=now, escalated_at__isnull=True)
        .exclude(escalate_to="")
        .exclude(pk__in=expiring)
        .values_list("pk", flat=True)[:limit]
    )
    expired = sum(approval_expire(request_id=pk, now=now) for pk in expiring)
    escalated = sum(approval_escalate(request_id=pk, now=now) for pk in escalating)
    return {"expired": expired, "escalated": escalated}
