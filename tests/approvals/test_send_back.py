"""approval_send_back: an approver sends a misread request back instead of rejecting it; the
run waits for a correction, and the corrected run asks for a fresh approval. A rejected run
is corrected and decided again as a new run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import connection

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide, approval_send_back
from audit.models import AuditAction, AuditEvent
from automation.models import Effect, EffectStatus, Outcome, Run, State
from automation.recovery.models import RecoveryAction, RecoveryKind
from automation.recovery.services import run_correct, run_correct_rejected
from core.codes import Refusal
from core.errors import ServiceError
from reports.histograms import DECIDED_BY_A_PERSON
from tests.approvals.claims import CORRECTED, claims_channel, misread_van_claim
from tests.approvals.test_decide import SECURITY_EVENT, decide, open_request
from tests.conftest import Pipeline, _user
from worker.dispatch import inline


@pytest.fixture
def claims(policy: None) -> Pipeline:
    return Pipeline(claims_channel())


@pytest.fixture
def payments_approver(db: None) -> User:
    return _user("pat", "payments-approvers")


@pytest.fixture
def claims_manager(db: None) -> User:
    return _user("clara", "claims-managers")


@pytest.fixture
def lead(db: None) -> User:
    return _user("olga", "ops-leads", is_staff=True)


@pytest.fixture(autouse=True)
def roles(db: None) -> None:
    roles_ensure()


def send_back(pipeline: Pipeline, request: ApprovalRequest, user: User, reason: str) -> None:
    with pipeline.capture():
        approval_send_back(request_id=request.pk, user=user, reason=reason)
    pipeline.drain()


def refused(pipeline: Pipeline, request: ApprovalRequest, user: User, reason: str = "no") -> str:
    with pytest.raises(ServiceError) as caught:
        send_back(pipeline, request, user, reason)
    return caught.value.code


def correct(pipeline: Pipeline, run_id: int, user: User, *, rejected: bool = False) -> Run:
    service = run_correct_rejected if rejected else run_correct
    with pipeline.capture():
        result = service(
            run_id=run_id, user=user, corrected=CORRECTED, reason="a van claim, not bank details"
        )
    pipeline.drain()
    return Run.objects.get(pk=result.run.pk)


# --- sending back --------------------------------------------------------------------------


def test_a_request_sent_back_is_closed_as_sent_back_and_its_run_waits_for_a_correction(
    claims: Pipeline, payments_approver: User
) -> None:
    request = misread_van_claim(claims)

    send_back(claims, request, payments_approver, "The IBAN is the sender's signature.")

    request.refresh_from_db()
    assert request.status == ApprovalStatus.SENT_BACK
    assert request.status_reason == "The IBAN is the sender's signature."
    assert request.decided_at is not None
    assert request.status not in DECIDED_BY_A_PERSON  # not a decision in the reports
    assert not ApprovalDecision.objects.filter(request=request).exists()
    run = Run.objects.get(pk=request.run_id)
    assert (run.state, run.outcome, run.queue) == (
        State.NEEDS_REVIEW,
        Outcome.SENT_BACK,
        Outcome.SENT_BACK,
    )
    assert run.failure_detail == "The IBAN is the sender's signature."
    assert not Effect.objects.filter(run=run).exists()
    event = AuditEvent.objects.get(approval=request, action=AuditAction.APPROVAL_SENT_BACK)
    assert event.actor == payments_approver
    assert event.data["reason"] == "The IBAN is the sender's signature."
    assert run.audit_events.filter(action=AuditAction.RUN_SEND_BACK).exists()
    assert run.stages.filter(stage="approve", outcome="sent_back").exists()


def test_only_someone_who_may_decide_the_request_sends_it_back(
    claims: Pipeline, claims_manager: User
) -> None:
    request = misread_van_claim(claims)  # routed to the payments approvers

    assert refused(claims, request, claims_manager) == Refusal.FORBIDDEN
    request.refresh_from_db()
    assert request.status == ApprovalStatus.PENDING


def test_whoever_acted_on_the_run_may_not_send_it_back(
    claims: Pipeline, payments_approver: User, lead: User
) -> None:
    request = misread_van_claim(claims)
    lead.groups.add(*payments_approver.groups.all())
    AuditEvent.objects.create(
        run_id=request.run_id, action=AuditAction.RUN_NUDGED, actor=lead, actor_label="olga"
    )

    assert refused(claims, request, lead) == Refusal.SEPARATION_OF_DUTIES


def test_a_send_back_needs_a_reason(claims: Pipeline, payments_approver: User) -> None:
    request = misread_van_claim(claims)

    assert refused(claims, request, payments_approver, "  ") == Refusal.REASON_REQUIRED
    assert refused(claims, request, payments_approver, "x" * 201) == Refusal.TOO_LONG


def test_a_decided_or_expired_request_is_not_sent_back(
    pipeline: Pipeline, approver: User, second_approver: User
) -> None:
    request = open_request(pipeline)
    decide(pipeline, request, approver, approve=False, comment="no")

    assert refused(pipeline, request, second_approver) == Refusal.ALREADY_DECIDED

    other = open_request(pipeline, {**SECURITY_EVENT, "event_id": "evt-sec-2"})
    with time_machine.travel(other.expires_at + timedelta(seconds=1)):
        assert refused(pipeline, other, approver) == Refusal.APPROVAL_EXPIRED
    other.refresh_from_db()
    assert other.status == ApprovalStatus.PENDING  # the sweep expires it, not a send back


def test_a_request_sent_back_is_no_longer_decided(
    claims: Pipeline, payments_approver: User
) -> None:
    request = misread_van_claim(claims)
    send_back(claims, request, payments_approver, "read wrongly")
    second = _user("pia", "payments-approvers")

    with pytest.raises(ServiceError) as caught, claims.capture():
        approval_decide(request_id=request.pk, user=second, approve=True, seen=request.binding())

    assert caught.value.code == Refusal.ALREADY_DECIDED


# --- the whole path: send back, correct, a fresh approval, approve -------------------------


def test_a_sent_back_run_corrected_asks_for_a_fresh_approval_and_is_delivered_once(
    claims: Pipeline, payments_approver: User, claims_manager: User, lead: User
) -> None:
    request = misread_van_claim(claims)
    send_back(claims, request, payments_approver, "A van claim: the IBAN is the signature.")

    run = correct(claims, request.run_id, lead)

    assert run.state == State.APPROVAL_REQUIRED
    fresh = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    assert fresh.pk != request.pk
    assert (fresh.effect, fresh.group) == ("open_claim", "claims-managers")
    assert fresh.binding() != request.binding()
    assert lead.pk in fresh.evidence["conflicted_user_ids"]
    # The corrector may not approve it, even in the group.
    lead.groups.add(*claims_manager.groups.all())
    with pytest.raises(ServiceError) as caught, claims.capture():
        approval_decide(request_id=fresh.pk, user=lead, approve=True, seen=fresh.binding())
    assert caught.value.code == Refusal.SEPARATION_OF_DUTIES

    decide(claims, fresh, claims_manager)

    run.refresh_from_db()
    assert run.state == State.COMPLETED
    (effect,) = Effect.objects.filter(run__in=[run.pk])
    assert (effect.name, effect.status) == ("open_claim", EffectStatus.DELIVERED)
    assert effect.authorization["approval_request"] == fresh.pk
    request.refresh_from_db()
    assert request.status == ApprovalStatus.SENT_BACK
    assert request.consumed_at is None
    # On the record, in order: sent back, corrected, approved.
    actions = list(run.audit_events.values_list("action", flat=True))
    assert actions.index(AuditAction.RUN_SEND_BACK) < actions.index(AuditAction.RUN_CORRECT_READING)
    assert actions.index(AuditAction.RUN_CORRECT_READING) < actions.index(
        AuditAction.APPROVAL_APPROVE
    )


def test_the_approver_who_sent_it_back_may_approve_the_corrected_run(
    claims: Pipeline, payments_approver: User, lead: User
) -> None:
    request = misread_van_claim(claims)
    send_back(claims, request, payments_approver, "read wrongly")
    payments_approver.groups.add(_user("x", "claims-managers").groups.get())

    run = correct(claims, request.run_id, lead)
    fresh = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    decide(claims, fresh, payments_approver)

    run.refresh_from_db()
    assert run.state == State.COMPLETED


# --- a rejected run, corrected and decided again -------------------------------------------


def test_a_rejected_run_corrected_is_a_new_run_with_the_persons_reading_and_a_fresh_approval(
    claims: Pipeline, payments_approver: User, claims_manager: User, lead: User
) -> None:
    request = misread_van_claim(claims)
    decide(claims, request, payments_approver, approve=False, comment="not a bank change")
    rejected = Run.objects.get(pk=request.run_id)
    assert (rejected.state, rejected.outcome) == (State.FAILED, Outcome.APPROVAL_REJECTED)

    replay = correct(claims, rejected.pk, lead, rejected=True)

    assert replay.pk != rejected.pk and replay.replay_of_id == rejected.pk
    assert replay.state == State.APPROVAL_REQUIRED
    assert (replay.category, replay.effect_name) == ("motor_claim", "open_claim")
    checkpoint = replay.checkpoints.get(source="correction")
    assert checkpoint.data["corrected_by"] == lead.pk
    assert checkpoint.data["classification"]["category"] == "motor_claim"
    assert not replay.classifications.exists()  # no classifier read it again
    rejected.refresh_from_db()
    assert (rejected.state, rejected.outcome) == (State.FAILED, Outcome.APPROVAL_REJECTED)
    assert rejected.audit_events.filter(action=AuditAction.RUN_CORRECT_REJECTED).exists()
    assert RecoveryAction.objects.filter(run=replay, action=RecoveryKind.CORRECT_REJECTED).exists()
    fresh = ApprovalRequest.objects.get(run=replay, status=ApprovalStatus.PENDING)
    assert fresh.group == "claims-managers"
    lead.groups.add(*claims_manager.groups.all())
    with pytest.raises(ServiceError) as caught, claims.capture():
        approval_decide(request_id=fresh.pk, user=lead, approve=True, seen=fresh.binding())
    assert caught.value.code == Refusal.SEPARATION_OF_DUTIES

    decide(claims, fresh, claims_manager)

    replay.refresh_from_db()
    assert replay.state == State.COMPLETED
    assert list(Effect.objects.values_list("name", "status")) == [
        ("open_claim", EffectStatus.DELIVERED)
    ]


def test_only_a_rejected_run_is_corrected_as_a_new_run(
    claims: Pipeline, payments_approver: User, lead: User
) -> None:
    request = misread_van_claim(claims)

    with pytest.raises(ServiceError) as caught:
        run_correct_rejected(run_id=request.run_id, user=lead, corrected=CORRECTED, reason="r")

    assert caught.value.code == Refusal.STATE_CONFLICT
    assert not Run.objects.filter(replay_of_id=request.run_id).exists()


def test_correcting_a_rejected_run_needs_the_correct_permission(
    claims: Pipeline, payments_approver: User
) -> None:
    request = misread_van_claim(claims)
    decide(claims, request, payments_approver, approve=False, comment="no")

    with pytest.raises(PermissionDenied):
        run_correct_rejected(
            run_id=request.run_id, user=payments_approver, corrected=CORRECTED, reason="r"
        )


# --- at the same moment --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_send_back_and_an_approval_at_once_close_the_request_once(
    pipeline: Pipeline, approver: User, second_approver: User
) -> None:
    request = open_request(pipeline)
    barrier = threading.Barrier(2)
    codes: dict[str, str] = {}
    unexpected: list[BaseException] = []

    def act(name: str, action: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=10)
            with inline():  # the follow-up is not under test here
                action()
            codes[name] = "done"
        except ServiceError as exc:
            codes[name] = exc.code
        except BaseException as exc:
            unexpected.append(exc)
        finally:
            connection.close()

    sending = threading.Thread(
        target=act,
        args=(
            "send_back",
            lambda: approval_send_back(request_id=request.pk, user=approver, reason="read wrongly"),
        ),
    )
    approving = threading.Thread(
        target=act,
        args=(
            "approve",
            lambda: approval_decide(
                request_id=request.pk, user=second_approver, approve=True, seen=request.binding()
            ),
        ),
    )
    for thread in (sending, approving):
        thread.start()
    for thread in (sending, approving):
        thread.join(timeout=30)

    assert unexpected == []
    assert sorted(codes.values()) == ["already_decided", "done"]
    request.refresh_from_db()
    winner = next(name for name, code in codes.items() if code == "done")
    expected = ApprovalStatus.SENT_BACK if winner == "send_back" else ApprovalStatus.APPROVED
    assert request.status == expected
    counted = ApprovalDecision.objects.filter(request=request, counted=True).count()
    assert counted == (0 if winner == "send_back" else 1)
