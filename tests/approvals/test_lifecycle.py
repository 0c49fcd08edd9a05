"""An approval's life around its run: re-decision, self-approval, expiry, escalation, restart."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals import selectors
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from audit.models import AuditEvent
from automation.models import Effect, Outcome, Run, State
from automation.pipeline.operations import run_reconsider, sweep_due
from core.errors import ServiceError
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event


@pytest.fixture
def waiting(pipeline: Pipeline) -> ApprovalRequest:
    roles_ensure()
    event = make_event(
        event_id="evt-life", request_type="security", requested_action="queue_account_review"
    )
    pipeline.submit(event, [decision_for(event, reason_code="security_sensitive")])
    return ApprovalRequest.objects.get(run__event_id="evt-life")


def member(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(*[Group.objects.get(name=name) for name in groups])
    return user


def approve(pipeline: Pipeline, request: ApprovalRequest, user: User, **seen: str) -> str:
    with pipeline.capture():
        result = approval_decide(
            request_id=request.pk, user=user, approve=True, seen=replace(request.binding(), **seen)
        )
    pipeline.drain()
    return result.code


def activate_policy_2() -> None:
    text = (
        (DEFAULTS_DIR / "policy-1.yaml")
        .read_text()
        .replace("version: policy-1", "version: policy-2")
    )
    policy_version_create(document=parse_policy_text(text))
    policy_version_activate(name="policy-2")


def reconsider(pipeline: Pipeline, run_id: int, user: User) -> str:
    with pipeline.capture():
        state = run_reconsider(run_id=run_id, user=user, reason="policy changed")
    pipeline.drain()
    return state


def test_redecided_under_a_new_policy_the_old_approval_is_stale(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    approver = member("ana", "security-approvers")
    staff = member("sam", "recovery-staff")
    activate_policy_2()

    reconsider(pipeline, waiting.run_id, staff)

    old = ApprovalRequest.objects.get(pk=waiting.pk)
    fresh = ApprovalRequest.objects.get(run_id=waiting.run_id, status=ApprovalStatus.PENDING)
    assert old.status == ApprovalStatus.STALE
    assert fresh.policy_version == "policy-2"
    assert Run.objects.get(pk=waiting.run_id).policy_version == "policy-2"
    with pytest.raises(ServiceError) as refused:
        approve(pipeline, old, approver)
    assert refused.value.code == "approval_stale"
    assert not Effect.objects.exists()
    inbox = selectors.inbox(user=approver, scope="mine", overdue_only=False, now=fresh.created_at)
    assert [row.request.pk for row in inbox] == [fresh.pk]
    assert approve(pipeline, fresh, approver) == "approved"
    assert Run.objects.get(pk=waiting.run_id).state == State.COMPLETED


def test_approved_but_not_yet_executed_approval_goes_stale_when_redecided(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    approver = member("ana", "security-approvers")
    staff = member("sam", "recovery-staff")
    with pipeline.capture():
        approval_decide(request_id=waiting.pk, user=approver, approve=True, seen=waiting.binding())
    pipeline.queue.clear()  # the worker has not picked the decision up yet
    activate_policy_2()

    reconsider(pipeline, waiting.run_id, staff)

    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.STALE
    assert Run.objects.get(pk=waiting.run_id).state == State.APPROVAL_REQUIRED
    assert not Effect.objects.exists()


def test_whoever_redecided_the_run_cannot_approve_it(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    both = member("kim", "security-approvers", "recovery-staff")
    reconsider(pipeline, waiting.run_id, both)
    fresh = ApprovalRequest.objects.get(run_id=waiting.run_id, status=ApprovalStatus.PENDING)

    with pytest.raises(ServiceError) as refused:
        approve(pipeline, fresh, both)

    assert refused.value.code == "separation_of_duties"
    assert not selectors.can_decide(both, fresh)
    assert approve(pipeline, fresh, member("ana", "security-approvers")) == "approved"


def test_redecide_needs_the_recovery_permission(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    approver = member("ana", "security-approvers")
    with pytest.raises(PermissionDenied, match="may not re-decide"):
        run_reconsider(run_id=waiting.run_id, user=approver, reason="because")
    assert Run.objects.get(pk=waiting.run_id).state == State.APPROVAL_REQUIRED


def test_redecide_of_a_completed_run_is_refused_as_state_conflict(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    approve(pipeline, waiting, member("ana", "security-approvers"))
    staff = member("sam", "recovery-staff")
    with pytest.raises(ServiceError) as refused:
        run_reconsider(run_id=waiting.run_id, user=staff, reason="x")
    assert refused.value.code == Outcome.STATE_CONFLICT
    assert AuditEvent.objects.filter(action="transition.refused", actor=staff).exists()


def test_the_sweep_expires_an_undecided_request_and_a_fresh_one_opens(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    later = waiting.expires_at + timedelta(minutes=1)
    with time_machine.travel(later, tick=False):
        with pipeline.capture():
            result = sweep_due(now=later)
        pipeline.drain()

    assert result["expired"] == 1
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.EXPIRED
    assert AuditEvent.objects.filter(action="approval.expired", approval_id=waiting.pk).exists()
    run = Run.objects.get(pk=waiting.run_id)
    assert (run.state, run.outcome) == (State.APPROVAL_REQUIRED, Outcome.APPROVAL_EXPIRED)
    fresh = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    assert fresh.expires_at > later


def test_the_sweep_escalates_an_overdue_request_once_to_the_policy_group(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    due = waiting.escalate_at + timedelta(minutes=1)
    assert due < waiting.expires_at
    lead = member("lee", "ops-leads")
    assert not selectors.can_decide(lead, waiting)

    with time_machine.travel(due, tick=False):
        first = sweep_due(now=due)
        second = sweep_due(now=due + timedelta(minutes=1))

    assert (first["escalated"], second["escalated"]) == (1, 0)
    escalated = ApprovalRequest.objects.get(pk=waiting.pk)
    assert escalated.escalated_at == due
    assert selectors.sla_state(escalated, due) == "escalated"
    event = AuditEvent.objects.get(action="approval.escalated", approval_id=waiting.pk)
    assert event.data["to_group"] == "ops-leads"
    assert selectors.can_decide(lead, escalated)
    mine = selectors.inbox(user=lead, scope="mine", overdue_only=True, now=due)
    assert [row.request.pk for row in mine] == [waiting.pk]


def test_a_pending_approval_survives_a_worker_restart(
    pipeline: Pipeline, waiting: ApprovalRequest
) -> None:
    # The worker that opened the request is gone: nothing of it is in memory any more.
    restarted = Pipeline(pipeline.channel)
    approver = member("ana", "security-approvers")
    with restarted.capture():
        approval_decide(request_id=waiting.pk, user=approver, approve=True, seen=waiting.binding())
    restarted.queue.clear()  # and the decision's message is lost in a second crash
    assert Run.objects.get(pk=waiting.run_id).state == State.APPROVAL_REQUIRED

    # Right after the decision its message may still be waiting: the sweep leaves it.
    with restarted.capture():
        assert sweep_due()["runs"] == 0
    assert not restarted.queue
    # Once it has been out longer than a lease, it is lost: the sweep sends another.
    later = timezone.now() + timedelta(seconds=settings.GATEHOUSE["STAGE_LEASE_SECONDS"] + 1)
    with restarted.capture():
        nudged = sweep_due(now=later)
    restarted.drain()

    assert nudged["runs"] == 1
    assert Run.objects.get(pk=waiting.run_id).state == State.COMPLETED
    assert Effect.objects.count() == 1


def test_the_sweep_leaves_a_waiting_run_alone(pipeline: Pipeline, waiting: ApprovalRequest) -> None:
    with pipeline.capture():
        nudged = sweep_due()
    assert nudged["runs"] == 0
    assert list(pipeline.queue) == []
