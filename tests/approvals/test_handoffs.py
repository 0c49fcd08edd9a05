"""Who works on a request: an approver takes it up, a lead gives it to a member of its group
(who is told), and either gives it back; separation of duties holds through every hand-off."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from approvals.services import approval_assign, approval_claim, approval_release
from audit.models import AuditAction, AuditEvent
from core.errors import ServiceError
from notifications.models import Kind, Notification
from notifications.services import notifications_find
from tests.conftest import Pipeline, decision_for, make_event


@pytest.fixture
def request_(pipeline: Pipeline) -> ApprovalRequest:
    roles_ensure()
    event = make_event(
        event_id="evt-hand", request_type="security", requested_action="queue_account_review"
    )
    pipeline.submit(event, [decision_for(event, reason_code="security_sensitive")])
    return ApprovalRequest.objects.get(run__event_id="evt-hand")


def person(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(*[Group.objects.get_or_create(name=name)[0] for name in groups])
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_approver_takes_a_request_up_and_the_others_see_it(request_: ApprovalRequest) -> None:
    ana = person("ana", request_.group)
    bruno = person("bruno", request_.group)

    answer = client_for(ana).post(reverse("approvals:hand", args=[request_.pk, "claim"]))
    assert answer.status_code == 302
    request_.refresh_from_db()
    assert request_.assignee == ana and request_.assigned_at is not None
    assert AuditEvent.objects.filter(
        action=AuditAction.APPROVAL_CLAIMED, actor=ana, approval=request_
    ).exists()
    assert (
        "You have</strong> this request"
        in client_for(ana).get(reverse("approvals:evidence", args=[request_.pk])).content.decode()
    )
    page = client_for(bruno).get(reverse("approvals:evidence", args=[request_.pk]))
    assert "ana has</strong> this request" in page.content.decode()

    with pytest.raises(ServiceError, match="someone else has this request"):
        approval_claim(request_id=request_.pk, user=bruno, now=timezone.now())
    request_.refresh_from_db()
    assert request_.assignee == ana
    # Claiming is no hand on the run: ana may still decide it.
    assert not Notification.objects.filter(kind=Kind.ASSIGNED).exists()


def test_a_lead_gives_a_request_to_a_member_who_is_told_once(
    request_: ApprovalRequest,
) -> None:
    lead = person("lead", "ops-leads")
    ana = person("ana", request_.group)
    answer = client_for(lead).post(
        reverse("approvals:hand", args=[request_.pk, "assign"]), {"person": ana.pk}
    )
    assert answer.status_code == 302
    request_.refresh_from_db()
    assert request_.assignee == ana
    event = AuditEvent.objects.get(action=AuditAction.APPROVAL_ASSIGNED)
    assert (event.actor, event.data["assignee"]) == (lead, ana.pk)

    now = timezone.now()
    notifications_find(now=now)
    notifications_find(now=now)
    (told,) = Notification.objects.filter(kind=Kind.ASSIGNED)
    assert told.user == ana and told.approval == request_
    assert "A request is given to you" in told.subject and "Of: you." in told.body

    # Given back by the lead: the group has it again.
    approval_release(request_id=request_.pk, user=lead, now=now)
    request_.refresh_from_db()
    assert request_.assignee is None


def test_nobody_outside_the_group_or_who_acted_on_the_run_is_given_it(
    request_: ApprovalRequest,
) -> None:
    lead = person("lead", "ops-leads")
    outsider = person("outsider", "finance-approvers")
    corrector = person("corrector", request_.group, "ops-leads")
    now = timezone.now()

    with pytest.raises(ServiceError, match="is not in the"):
        approval_assign(request_id=request_.pk, assignee=outsider, by=lead, now=now)
    # Someone who corrected the run's reading may not decide it, so may not be given it.
    AuditEvent.objects.create(
        run_id=request_.run_id, actor=corrector, actor_label="corrector", action="run.correct"
    )
    with pytest.raises(ServiceError, match="acted on this run"):
        approval_assign(request_id=request_.pk, assignee=corrector, by=lead, now=now)
    with pytest.raises(ServiceError, match="acted on this run"):
        approval_claim(request_id=request_.pk, user=corrector, now=now)
    request_.refresh_from_db()
    assert request_.assignee is None
    # Nor are they offered on the page.
    page = client_for(lead).get(reverse("approvals:evidence", args=[request_.pk])).content
    assert b">corrector<" not in page and b">outsider<" not in page


def test_only_a_lead_gives_requests_and_only_the_holder_or_a_lead_gives_them_back(
    request_: ApprovalRequest,
) -> None:
    ana = person("ana", request_.group)
    bruno = person("bruno", request_.group)
    answer = client_for(ana).post(
        reverse("approvals:hand", args=[request_.pk, "assign"]), {"person": bruno.pk}
    )
    assert answer.status_code == 403
    approval_claim(request_id=request_.pk, user=ana, now=timezone.now())
    with pytest.raises(ServiceError, match="only its holder or a lead"):
        approval_release(request_id=request_.pk, user=bruno, now=timezone.now())
    approval_release(request_id=request_.pk, user=ana, now=timezone.now())
    request_.refresh_from_db()
    assert request_.assignee is None
    assert AuditEvent.objects.filter(action=AuditAction.APPROVAL_RELEASED, actor=ana).exists()
