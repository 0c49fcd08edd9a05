"""Reads behind the approval pages. Visibility is decided here, once, for every page."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet

from approvals.models import ApprovalRequest, ApprovalStatus

INBOX_LIMIT = 200
SCOPES = ("mine", "groups", "all")


def user_groups(user: User) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def sees_everything(user: User | AnonymousUser) -> bool:
    return user.is_superuser or user.has_perm("approvals.view_all_approvalrequests")


def visible_requests(user: User) -> QuerySet[ApprovalRequest]:
    """Requests routed (or escalated) to one of the user's groups; all for auditors and leads."""
    requests = ApprovalRequest.objects.all()
    if sees_everything(user):
        return requests
    groups = user_groups(user)
    return requests.filter(
        Q(group__in=groups) | Q(escalate_to__in=groups, escalated_at__isnull=False)
    )


def sla_state(request: ApprovalRequest, now: datetime) -> str:
    if request.escalated_at is not None:
        return "escalated"
    return "overdue" if now >= request.escalate_at else "due"


def can_decide(user: User, request: ApprovalRequest) -> bool:
    """Whether the decide buttons make sense for this user (the service has the last word)."""
    if not request.is_pending or not user.has_perm("approvals.decide_approvalrequest"):
        return False
    if user.pk in request.evidence.get("conflicted_user_ids", []):
        return False
    if any(d.user_id == user.pk and d.counted for d in request.decisions.all()):
        return False
    return user.is_superuser or bool(user_groups(user) & set(request.visible_groups()))


@dataclass(frozen=True)
class InboxRow:
    request: ApprovalRequest
    age: timedelta
    sla: str
    can_decide: bool
    reason: str
    amount: str | None
    approvals_given: int


def _one_line_reason(request: ApprovalRequest) -> str:
    rules = request.evidence.get("rules") or []
    text = rules[0]["text"] if rules else "policy requires approval"
    return f"{request.evidence.get('reason_code') or 'no reason code'}: {text}"


def _amount(request: ApprovalRequest) -> str | None:
    fields = (request.evidence.get("classification") or {}).get("fields") or {}
    amount = request.effect_payload.get("amount") or (fields.get("amount") or {}).get("value")
    return str(amount) if amount else None


def pending_for(user: User) -> QuerySet[ApprovalRequest]:
    return visible_requests(user).filter(status=ApprovalStatus.PENDING)


def inbox(*, user: User, scope: str, overdue_only: bool, now: datetime) -> list[InboxRow]:
    """Pending requests, oldest first. Two queries whatever the number of rows."""
    requests = pending_for(user)
    if scope in ("mine", "groups") and sees_everything(user) and not user.is_superuser:
        groups = user_groups(user)
        requests = requests.filter(
            Q(group__in=groups) | Q(escalate_to__in=groups, escalated_at__isnull=False)
        )
    if overdue_only:
        requests = requests.filter(escalate_at__lte=now)
    requests = requests.select_related("run").prefetch_related("decisions")
    rows = [_row(user, request, now) for request in requests.order_by("created_at")[:INBOX_LIMIT]]
    if scope == "mine":
        rows = [row for row in rows if row.can_decide]
    return rows


def _row(user: User, request: ApprovalRequest, now: datetime) -> InboxRow:
    return InboxRow(
        request=request,
        age=now - request.created_at,
        sla=sla_state(request, now),
        can_decide=can_decide(user, request),
        reason=_one_line_reason(request),
        amount=_amount(request),
        approvals_given=sum(1 for d in request.decisions.all() if d.counted and d.approve),
    )


def default_scope(user: User) -> str:
    """Deciders start with what is theirs to decide; readers with everything they may see."""
    return "mine" if user.has_perm("approvals.decide_approvalrequest") else "all"


def inbox_count(user: User, now: datetime) -> int:
    """What the default inbox shows, so the navigation and the page never disagree."""
    return len(inbox(user=user, scope=default_scope(user), overdue_only=False, now=now))


def request_for(user: User, request_id: int) -> ApprovalRequest | None:
    return (
        visible_requests(user)
        .select_related("run", "run__intake", "run__channel")
        .prefetch_related("decisions__user")
        .filter(pk=request_id)
        .first()
    )


def highlight(text: str, phrases: list[str]) -> list[tuple[str, bool]]:
    """Split text into (piece, highlighted) so a template can mark sources, escaped as usual."""
    wanted = sorted({p for p in phrases if p and p in text}, key=len, reverse=True)
    if not wanted:
        return [(text, False)]
    pattern = re.compile("|".join(re.escape(p) for p in wanted))
    pieces: list[tuple[str, bool]] = []
    position = 0
    for match in pattern.finditer(text):
        if match.start() > position:
            pieces.append((text[position : match.start()], False))
        pieces.append((match.group(0), True))
        position = match.end()
    if position < len(text):
        pieces.append((text[position:], False))
    return pieces


def evidence(request: ApprovalRequest) -> dict[str, Any]:
    """What the evidence page shows, read from the request's snapshot and its run."""
    run = request.run
    classification = request.evidence.get("classification") or {}
    fields = classification.get("fields") or {}
    sources = [f.get("source") or "" for f in fields.values()]
    normalized = run.normalized or {}
    attachments = []
    for attachment in normalized.get("attachments") or []:
        text = highlight(attachment.get("text", ""), sources) if attachment.get("text") else []
        marked = {**attachment, "marked": any(flag for _, flag in text)}
        attachments.append((marked, text))
    enrichment = run.enrichment or {}
    return {
        "mail": normalized if normalized.get("source") == "email" else None,
        "attachments": attachments,
        "customer": enrichment.get("customer"),
        "customer_matched_by": enrichment.get("customer_matched_by"),
        "account_tier": enrichment.get("account_tier"),
        "fields": sorted(fields.items()),
        "subject": highlight(normalized.get("subject", ""), sources),
        "body": highlight(normalized.get("body", ""), sources),
        "classification": classification,
        "required_by": request.evidence.get("rules") or [],
        "all_rules": run.rules,
        "versions": request.evidence.get("versions") or {},
        "stages": list(run.stages.all()),
        "history": list(run.audit_events.select_related("actor")),
        "decisions": list(request.decisions.all()),
        "earlier_requests": list(
            run.approvals.exclude(pk=request.pk).prefetch_related("decisions__user")
        ),
    }
