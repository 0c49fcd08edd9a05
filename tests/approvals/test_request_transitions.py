"""An approval request's status moves only through its transitions: a pending request is
approved, rejected, sent back, expired or made stale; an approved one not yet used may still
go stale or lapse; a closed one never moves again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from approvals.models import ApprovalRequest, ApprovalStatus
from automation.models import Run

NOW = timezone.now()


@pytest.fixture
def run(bare_run: Run) -> Run:
    return bare_run


def request_in(run: Run, status: str) -> ApprovalRequest:
    request = ApprovalRequest.objects.create(
        run=run,
        effect="queue_account_review",
        fingerprint="f" * 64,
        workflow_version="workflow-1",
        policy_version="policy-1",
        group="security",
        status=status,
        expires_at=NOW + timedelta(days=1),
        escalate_at=NOW + timedelta(hours=4),
    )
    return ApprovalRequest.objects.get(pk=request.pk)


def row(request: ApprovalRequest) -> dict[str, Any]:
    return ApprovalRequest.objects.values("status", "status_reason", "decided_at").get(
        pk=request.pk
    )


PENDING = {ApprovalStatus.PENDING}
INVALIDATED = {ApprovalStatus.PENDING, ApprovalStatus.APPROVED}
# (transition, its arguments, the statuses it leaves from, where it goes, the reason it keeps)
TRANSITIONS: list[tuple[str, dict[str, Any], set[str], str, str]] = [
    ("approve", {"now": NOW}, PENDING, ApprovalStatus.APPROVED, "approved"),
    ("reject", {"now": NOW}, PENDING, ApprovalStatus.REJECTED, "rejected"),
    (
        "send_back",
        {"reason": "the amount is misread", "now": NOW},
        PENDING,
        ApprovalStatus.SENT_BACK,
        "the amount is misread",
    ),
    (
        "expire",
        {"reason": "expired without a decision", "now": NOW},
        PENDING,
        ApprovalStatus.EXPIRED,
        "expired without a decision",
    ),
    (
        "go_stale",
        {"reason": "approval_stale", "now": NOW},
        INVALIDATED,
        ApprovalStatus.STALE,
        "approval_stale",
    ),
    (
        "lapse",
        {"reason": "approval_expired", "now": NOW},
        INVALIDATED,
        ApprovalStatus.EXPIRED,
        "approval_expired",
    ),
]
CASES = [
    pytest.param(*case, status, id=f"{case[0]}-from-{status}")
    for case in TRANSITIONS
    for status in ApprovalStatus
]


@pytest.mark.parametrize(("name", "kwargs", "sources", "target", "reason", "status"), CASES)
def test_a_transition_moves_only_from_its_sources(
    run: Run,
    name: str,
    kwargs: dict[str, Any],
    sources: set[str],
    target: str,
    reason: str,
    status: str,
) -> None:
    request = request_in(run, status)
    before = row(request)

    if status not in sources:
        with pytest.raises(TransitionNotAllowed):
            getattr(request, name)(**kwargs)
        assert request.status == status
        assert row(request) == before
        return
    getattr(request, name)(**kwargs)
    request.save(update_fields=["status", "status_reason", "decided_at"])

    assert row(request) == {"status": target, "status_reason": reason, "decided_at": NOW}


def test_status_cannot_be_assigned_directly(run: Run) -> None:
    request = request_in(run, ApprovalStatus.PENDING)

    with pytest.raises(AttributeError, match="Direct status modification is not allowed"):
        request.status = ApprovalStatus.APPROVED

    assert row(request)["status"] == ApprovalStatus.PENDING


def test_a_stale_copy_cannot_close_a_request_again(run: Run) -> None:
    """Two copies of one pending request: the first is rejected; the second's approval is
    refused on save rather than writing over the rejection."""
    first = request_in(run, ApprovalStatus.PENDING)
    second = ApprovalRequest.objects.get(pk=first.pk)
    first.reject(now=NOW)
    first.save(update_fields=["status", "status_reason", "decided_at"])

    second.approve(now=NOW)
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        second.save(update_fields=["status", "status_reason", "decided_at"])

    assert row(first)["status"] == ApprovalStatus.REJECTED
