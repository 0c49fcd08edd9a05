"""approval_decide: who may decide, what a decision binds, and what the run does next.

Approval requests are made by the real pipeline: a security event asking for an account
review, read the same way by the recorded classifier, stops in `approval_required`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_save

from approvals.binding import Binding
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from approvals.services import (
    ADVANCE_RUN_TASK,
    DecisionResult,
    approval_decide,
)
from audit.models import AuditEvent
from automation.models import Effect, Run, State
from core.errors import ServiceError
from tests.conftest import Pipeline, decision_for, make_event
from worker.dispatch import Message, inline

SECURITY_EVENT = make_event(
    event_id="evt-sec-1",
    request_type="security",
    subject="Unrecognised sign-in",
    body="Please review the account after an unrecognised sign-in.",
    requested_action="queue_account_review",
)


def open_request(pipeline: Pipeline, event: dict[str, Any] = SECURITY_EVENT) -> ApprovalRequest:
    """Submit the event; the pipeline stops with one pending request for the account review."""
    result = pipeline.submit(event, [decision_for(event)])
    run = pipeline.run(result)
    assert run.state == State.APPROVAL_REQUIRED
    return ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)


def decide(
    pipeline: Pipeline,
    request: ApprovalRequest,
    user: User,
    *,
    approve: bool = True,
    comment: str = "",
    seen: Binding | None = None,
    drain: bool = True,
) -> DecisionResult:
    """Decide as the console does, then let the pipeline act on what it enqueued."""
    with pipeline.capture():
        result = approval_decide(
            request_id=request.pk,
            user=user,
            approve=approve,
            comment=comment,
            seen=request.binding() if seen is None else seen,
        )
    if drain:
        pipeline.drain()
    return result


def refusal_code(pipeline: Pipeline, request: ApprovalRequest, user: User, **kwargs: Any) -> str:
    """Decide, expecting a refusal; returns its code."""
    with pytest.raises(ServiceError) as caught:
        decide(pipeline, request, user, **kwargs)
    return caught.value.code


def reload(request: ApprovalRequest) -> ApprovalRequest:
    return ApprovalRequest.objects.get(pk=request.pk)


def run_of(request: ApprovalRequest) -> Run:
    return Run.objects.get(pk=request.run_id)


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    # The conftest users get passwords; the default hasher costs ~0.3 s each.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def pending(pipeline: Pipeline) -> ApprovalRequest:
    return open_request(pipeline)


@pytest.fixture
def superuser(db: None, django_user_model: type[User]) -> User:
    return django_user_model.objects.create_superuser(username="root", password="pw-root")


# --- the request the pipeline opens ---------------------------------------------------------


def test_pipeline_opens_one_request_bound_to_the_run(pipeline: Pipeline) -> None:
    opened_at = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    with time_machine.travel(opened_at, tick=False):
        pending = open_request(pipeline)

    run = run_of(pending)
    assert ApprovalRequest.objects.filter(run=run).count() == 1
    assert pending.binding().as_dict() == {
        "fingerprint": run.fingerprint,
        "workflow_version": "workflow-1",
        "policy_version": "policy-1",
        "effect": "queue_account_review",
    }
    assert pending.group == "security-approvers"
    assert pending.required_approvals == 1
    assert pending.expires_at == opened_at + timedelta(hours=72)
    assert pending.escalate_at == opened_at + timedelta(hours=24)
    assert pending.escalate_to == "ops-leads"
    assert pending.effect_payload["effect"] == "queue_account_review"
    assert pending.effect_payload["route"] == "security_review"
    assert pending.effect_payload["event_id"] == "evt-sec-1"
    assert pending.evidence["conflicted_user_ids"] == []
    assert [r["rule_id"] for r in pending.evidence["rules"]] == ["approval.queue_account_review"]
    assert not Effect.objects.filter(run=run).exists()


# --- approving and rejecting ----------------------------------------------------------------


def test_approval_is_recorded_with_what_the_approver_saw(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    moment = pending.created_at + timedelta(hours=1)
    with time_machine.travel(moment, tick=False):
        result = decide(pipeline, pending, approver, comment="looks right", drain=False)

    assert result.code == "approved"
    decision = ApprovalDecision.objects.get(request=pending)
    assert decision == result.decision
    assert decision.user == approver
    assert decision.approve is True
    assert decision.comment == "looks right"
    assert decision.created_at == moment
    assert decision.seen_fingerprint == pending.fingerprint
    assert decision.seen_workflow_version == "workflow-1"
    assert decision.seen_policy_version == "policy-1"
    assert decision.seen_effect == "queue_account_review"
    assert decision.counted is True
    assert decision.refusal == ""
    closed = reload(pending)
    assert closed.status == ApprovalStatus.APPROVED
    assert closed.decided_at == moment


def test_approved_request_lets_the_run_complete_with_one_effect(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    decide(pipeline, pending, approver)

    run = run_of(pending)
    assert run.state == State.COMPLETED
    effect = Effect.objects.get(run=run)
    assert effect.name == "queue_account_review"
    assert effect.authorization == {"policy_version": "policy-1", "approval_request": pending.pk}
    assert reload(pending).consumed_at is not None


def test_rejection_without_a_comment_is_refused_and_records_nothing(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    for comment in ["", "   \n"]:
        code = refusal_code(pipeline, pending, approver, approve=False, comment=comment)
        assert code == "comment_required"

    assert not ApprovalDecision.objects.exists()
    assert reload(pending).status == ApprovalStatus.PENDING
    assert run_of(pending).state == State.APPROVAL_REQUIRED


def test_rejection_with_a_comment_closes_the_request_and_fails_the_run(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    result = decide(pipeline, pending, approver, approve=False, comment="not our customer")

    assert result.code == "rejected"
    decision = ApprovalDecision.objects.get(request=pending)
    assert (decision.approve, decision.comment, decision.counted) == (
        False,
        "not our customer",
        True,
    )
    assert reload(pending).status == ApprovalStatus.REJECTED
    run = run_of(pending)
    assert run.state == State.FAILED
    assert run.outcome == "approval_rejected"
    assert not Effect.objects.filter(run=run).exists()


def test_decision_rows_are_never_edited(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    decision = decide(pipeline, pending, approver, drain=False).decision
    decision.approve = False

    with pytest.raises(ValueError, match="append-only: update refused"):
        decision.save()

    assert ApprovalDecision.objects.get(pk=decision.pk).approve is True


# --- who may decide -------------------------------------------------------------------------


def test_user_outside_the_group_is_forbidden(
    pipeline: Pipeline, pending: ApprovalRequest, outsider: User
) -> None:
    with pytest.raises(ServiceError) as caught:
        decide(pipeline, pending, outsider)

    assert caught.value.code == "forbidden"
    assert "security-approvers" in caught.value.message
    assert not ApprovalDecision.objects.exists()
    assert reload(pending).status == ApprovalStatus.PENDING


def test_staff_ops_lead_is_not_an_approver_of_security_requests(
    pipeline: Pipeline, pending: ApprovalRequest, ops_lead: User
) -> None:
    assert refusal_code(pipeline, pending, ops_lead) == "forbidden"
    assert not ApprovalDecision.objects.exists()


def test_superuser_may_decide_without_the_group(
    pipeline: Pipeline, pending: ApprovalRequest, superuser: User
) -> None:
    result = decide(pipeline, pending, superuser)

    assert result.code == "approved"
    assert result.decision.user == superuser
    assert run_of(pending).state == State.COMPLETED


@pytest.mark.parametrize("who", ["approver", "superuser"])
def test_inactive_user_is_forbidden(
    pipeline: Pipeline, pending: ApprovalRequest, request: pytest.FixtureRequest, who: str
) -> None:
    user: User = request.getfixturevalue(who)
    user.is_active = False
    user.save(update_fields=["is_active"])

    assert refusal_code(pipeline, pending, user) == "forbidden"
    assert not ApprovalDecision.objects.exists()


@pytest.mark.parametrize("who", ["approver", "superuser"])
def test_conflicted_user_cannot_decide(
    pipeline: Pipeline, pending: ApprovalRequest, request: pytest.FixtureRequest, who: str
) -> None:
    user: User = request.getfixturevalue(who)
    ApprovalRequest.objects.filter(pk=pending.pk).update(
        evidence={**pending.evidence, "conflicted_user_ids": [user.pk]}
    )

    for approve, comment in [(True, ""), (False, "I wrote it, but no")]:
        code = refusal_code(pipeline, pending, user, approve=approve, comment=comment)
        assert code == "separation_of_duties"
    assert not ApprovalDecision.objects.exists()
    assert reload(pending).status == ApprovalStatus.PENDING


def test_someone_else_may_approve_a_conflicted_request(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User, second_approver: User
) -> None:
    ApprovalRequest.objects.filter(pk=pending.pk).update(
        evidence={**pending.evidence, "conflicted_user_ids": [approver.pk]}
    )

    assert decide(pipeline, pending, second_approver).code == "approved"
    assert run_of(pending).state == State.COMPLETED


# --- already decided ------------------------------------------------------------------------


@pytest.mark.parametrize(("approve", "comment"), [(True, ""), (False, "too late to object")])
def test_deciding_an_approved_request_is_already_decided(
    pipeline: Pipeline,
    pending: ApprovalRequest,
    approver: User,
    second_approver: User,
    approve: bool,
    comment: str,
) -> None:
    decide(pipeline, pending, approver)

    code = refusal_code(pipeline, pending, second_approver, approve=approve, comment=comment)

    assert code == "already_decided"
    assert ApprovalDecision.objects.filter(request=pending).count() == 1
    assert reload(pending).status == ApprovalStatus.APPROVED


def test_deciding_a_rejected_request_is_already_decided(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User, second_approver: User
) -> None:
    decide(pipeline, pending, approver, approve=False, comment="no")

    assert refusal_code(pipeline, pending, second_approver) == "already_decided"
    assert reload(pending).status == ApprovalStatus.REJECTED


def test_one_person_cannot_count_twice_on_a_two_approver_request(
    two_approver_policy: None, pipeline: Pipeline, approver: User
) -> None:
    pending = open_request(pipeline)
    decide(pipeline, pending, approver)

    assert refusal_code(pipeline, pending, approver) == "already_decided"
    assert (
        refusal_code(pipeline, pending, approver, approve=False, comment="changed my mind")
        == "already_decided"
    )
    assert ApprovalDecision.objects.filter(request=pending, user=approver).count() == 1
    assert reload(pending).status == ApprovalStatus.PENDING
    assert run_of(pending).state == State.APPROVAL_REQUIRED


def test_database_refuses_a_second_counted_decision_by_one_person(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    decision = decide(pipeline, pending, approver, drain=False).decision

    with pytest.raises(IntegrityError), transaction.atomic():
        ApprovalDecision.objects.create(
            request=pending,
            user=approver,
            approve=True,
            seen_fingerprint=decision.seen_fingerprint,
            seen_workflow_version=decision.seen_workflow_version,
            seen_policy_version=decision.seen_policy_version,
            seen_effect=decision.seen_effect,
        )


# --- two approvers --------------------------------------------------------------------------


def test_two_approver_request_needs_two_distinct_approvers(
    two_approver_policy: None, pipeline: Pipeline, approver: User, second_approver: User
) -> None:
    pending = open_request(pipeline)
    assert pending.policy_version == "policy-2"
    assert pending.required_approvals == 2

    first = decide(pipeline, pending, approver)

    assert first.code == "recorded"
    assert first.decision.counted is True
    assert reload(pending).status == ApprovalStatus.PENDING
    assert run_of(pending).state == State.APPROVAL_REQUIRED
    assert not Effect.objects.filter(run_id=pending.run_id).exists()

    second = decide(pipeline, pending, second_approver)

    assert second.code == "approved"
    assert reload(pending).status == ApprovalStatus.APPROVED
    run = run_of(pending)
    assert run.state == State.COMPLETED
    assert run.policy_version == "policy-2"
    assert Effect.objects.filter(run=run).count() == 1


def test_one_rejection_closes_a_two_approver_request(
    two_approver_policy: None, pipeline: Pipeline, approver: User, second_approver: User
) -> None:
    pending = open_request(pipeline)
    decide(pipeline, pending, approver)

    result = decide(pipeline, pending, second_approver, approve=False, comment="wrong account")

    assert result.code == "rejected"
    assert run_of(pending).outcome == "approval_rejected"


# --- stale views ----------------------------------------------------------------------------

STALE_VIEWS = {
    "older workflow": {"workflow_version": "workflow-0"},
    "other policy": {"policy_version": "policy-0"},
    "other effect": {"effect": "create_follow_up"},
    "other input": {"fingerprint": "0" * 64},
}


@pytest.mark.parametrize("change", list(STALE_VIEWS.values()), ids=list(STALE_VIEWS))
def test_stale_view_is_stored_uncounted_and_leaves_the_run_waiting(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User, change: dict[str, str]
) -> None:
    seen = replace(pending.binding(), **change)

    result = decide(pipeline, pending, approver, seen=seen)

    assert result.code == "approval_stale"
    decision = ApprovalDecision.objects.get(request=pending)
    assert decision.counted is False
    assert decision.refusal == "approval_stale"
    assert {
        "fingerprint": decision.seen_fingerprint,
        "workflow_version": decision.seen_workflow_version,
        "policy_version": decision.seen_policy_version,
        "effect": decision.seen_effect,
    } == seen.as_dict()
    assert reload(pending).status == ApprovalStatus.PENDING
    run = run_of(pending)
    assert run.state == State.APPROVAL_REQUIRED
    assert run.outcome == "approval_stale"
    assert not Effect.objects.filter(run=run).exists()


def test_fresh_approval_after_a_stale_one_completes_the_run(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    decide(pipeline, pending, approver, seen=replace(pending.binding(), policy_version="policy-0"))

    result = decide(pipeline, pending, approver)

    assert result.code == "approved"
    assert ApprovalDecision.objects.filter(request=pending, counted=True).count() == 1
    run = run_of(pending)
    assert run.state == State.COMPLETED
    assert run.outcome != "approval_stale"
    assert Effect.objects.filter(run=run).count() == 1


def test_stale_approval_on_a_two_approver_request_does_not_count(
    two_approver_policy: None, pipeline: Pipeline, approver: User, second_approver: User
) -> None:
    pending = open_request(pipeline)
    decide(pipeline, pending, approver, seen=replace(pending.binding(), workflow_version="w-0"))

    assert decide(pipeline, pending, second_approver).code == "recorded"
    assert reload(pending).status == ApprovalStatus.PENDING
    assert run_of(pending).state == State.APPROVAL_REQUIRED


# --- expiry ---------------------------------------------------------------------------------


def test_decision_after_expiry_expires_the_request_and_the_run_gets_a_new_one(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    late = pending.expires_at + timedelta(minutes=1)
    with time_machine.travel(late, tick=False):
        result = decide(pipeline, pending, approver)

    assert result.code == "approval_expired"
    decision = ApprovalDecision.objects.get(request=pending)
    assert (decision.counted, decision.refusal) == (False, "approval_expired")
    expired = reload(pending)
    assert expired.status == ApprovalStatus.EXPIRED
    assert expired.decided_at == late
    run = run_of(pending)
    assert run.state == State.APPROVAL_REQUIRED
    assert run.outcome == "approval_expired"
    assert not Effect.objects.filter(run=run).exists()
    fresh = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    assert fresh.pk != pending.pk
    assert fresh.binding() == pending.binding()
    assert fresh.expires_at == late + timedelta(hours=72)


def test_approval_exactly_at_expiry_is_expired(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    with time_machine.travel(pending.expires_at, tick=False):
        assert decide(pipeline, pending, approver).code == "approval_expired"


def test_approval_just_before_expiry_counts(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    with time_machine.travel(pending.expires_at - timedelta(seconds=1), tick=False):
        assert decide(pipeline, pending, approver).code == "approved"

    assert run_of(pending).state == State.COMPLETED


def test_the_new_request_after_expiry_can_be_approved(
    pipeline: Pipeline, pending: ApprovalRequest, approver: User
) -> None:
    with time_machine.travel(pending.expires_at + timedelta(hours=1), tick=False):
        decide(pipeline, pending, approver)
        fresh = ApprovalRequest.objects.get(run_id=pending.run_id, status=ApprovalStatus.PENDING)

        assert refusal_code(pipeline, pending, approver) == "approval_expired"
        assert decide(pipeline, fresh, approver).code == "approved"

    assert run_of(pending).state == State.COMPLETED


# --- follow-up work after commit ------------------------------------------------------------


@contextlib.contextmanager
def on_audit_row(receiver: Callable[..., None]) -> Iterator[None]:
    """Call `receiver` when an audit row is written: the decision's last write, inside its
    transaction (the service owns it: nothing may wrap it)."""
    post_save.connect(receiver, sender=AuditEvent, weak=False)
    try:
        yield
    finally:
        post_save.disconnect(receiver, sender=AuditEvent)


@pytest.mark.django_db(transaction=True)  # about real commits
def test_follow_up_is_queued_only_after_the_decision_commits(
    pending: ApprovalRequest, approver: User
) -> None:
    inside: list[tuple[bool, list[Message]]] = []
    with inline() as queue:

        def note(**kwargs: Any) -> None:
            inside.append((connection.in_atomic_block, list(queue)))

        with on_audit_row(note):
            approval_decide(
                request_id=pending.pk, user=approver, approve=True, seen=pending.binding()
            )
        assert inside == [(True, [])]
        assert list(queue) == [Message(ADVANCE_RUN_TASK, (pending.run_id,))]


def test_rolled_back_decision_leaves_no_decision_and_no_message(
    pending: ApprovalRequest, approver: User, django_capture_on_commit_callbacks: Any
) -> None:
    def fail(**kwargs: Any) -> None:
        raise RuntimeError("the audit trail failed after deciding")

    with (
        inline() as queue,
        django_capture_on_commit_callbacks(execute=True),
        on_audit_row(fail),
        pytest.raises(RuntimeError),
    ):
        approval_decide(request_id=pending.pk, user=approver, approve=True, seen=pending.binding())

    assert list(queue) == []
    assert not ApprovalDecision.objects.exists()
    assert reload(pending).status == ApprovalStatus.PENDING


@pytest.mark.django_db(transaction=True)  # about real commits
@pytest.mark.parametrize(
    ("approve", "comment", "seen_change"),
    [
        (False, "no", {}),
        (True, "", {"workflow_version": "workflow-0"}),
    ],
    ids=["rejected", "stale"],
)
def test_rejection_and_refusal_queue_the_run_once_after_commit(
    pending: ApprovalRequest,
    approver: User,
    approve: bool,
    comment: str,
    seen_change: dict[str, str],
) -> None:
    with inline() as queue:
        approval_decide(
            request_id=pending.pk,
            user=approver,
            approve=approve,
            comment=comment,
            seen=replace(pending.binding(), **seen_change),
        )

    assert list(queue) == [Message(ADVANCE_RUN_TASK, (pending.run_id,))]


def test_first_of_two_approvals_queues_nothing(
    two_approver_policy: None, pipeline: Pipeline, approver: User
) -> None:
    pending = open_request(pipeline)

    with inline() as queue:
        approval_decide(request_id=pending.pk, user=approver, approve=True, seen=pending.binding())

    assert list(queue) == []


def test_refused_decision_queues_nothing(pending: ApprovalRequest, outsider: User) -> None:
    with inline() as queue, pytest.raises(ServiceError):
        approval_decide(request_id=pending.pk, user=outsider, approve=True, seen=pending.binding())

    assert list(queue) == []


# --- at the same moment ---------------------------------------------------------------------


def _decide_in_threads(
    request: ApprovalRequest, users: list[User]
) -> list[DecisionResult | ServiceError]:
    barrier = threading.Barrier(len(users))
    results: list[DecisionResult | ServiceError] = [None] * len(users)  # type: ignore[list-item]
    unexpected: list[BaseException] = []

    def click(index: int, user: User) -> None:
        try:
            barrier.wait(timeout=10)
            with inline():  # the follow-up is not under test here
                results[index] = approval_decide(
                    request_id=request.pk, user=user, approve=True, seen=request.binding()
                )
        except ServiceError as exc:
            results[index] = exc
        except BaseException as exc:
            unexpected.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=click, args=(i, user)) for i, user in enumerate(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert unexpected == []
    return results


def _codes(results: list[DecisionResult | ServiceError]) -> list[str]:
    return sorted(r.code for r in results)


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_on_a_one_approver_request_decide_it_once(
    pending: ApprovalRequest, approver: User, second_approver: User
) -> None:
    results = _decide_in_threads(pending, [approver, second_approver])

    assert _codes(results) == ["already_decided", "approved"]
    decision = ApprovalDecision.objects.get(request=pending)
    assert decision.counted is True
    winner = next(r for r in results if isinstance(r, DecisionResult))
    assert decision.user_id == winner.decision.user_id
    assert reload(pending).status == ApprovalStatus.APPROVED


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_on_a_two_approver_request_both_count(
    two_approver_policy: None, pipeline: Pipeline, approver: User, second_approver: User
) -> None:
    pending = open_request(pipeline)

    results = _decide_in_threads(pending, [approver, second_approver])

    assert _codes(results) == ["approved", "recorded"]
    assert ApprovalDecision.objects.filter(request=pending, counted=True).count() == 2
    assert reload(pending).status == ApprovalStatus.APPROVED


@pytest.mark.django_db(transaction=True)
def test_one_person_clicking_twice_at_once_counts_once(
    two_approver_policy: None, pipeline: Pipeline, approver: User
) -> None:
    pending = open_request(pipeline)

    results = _decide_in_threads(pending, [approver, approver])

    assert _codes(results) == ["already_decided", "recorded"]
    assert ApprovalDecision.objects.filter(request=pending, user=approver).count() == 1
    assert reload(pending).status == ApprovalStatus.PENDING
