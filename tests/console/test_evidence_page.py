"""The evidence page's reading (console.evidence.evidence_page): what it holds for each person,
and what a decision did next, in words."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals import selectors
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from automation.runs.comments import run_comment_add
from console.evidence import evidence_page
from tests.conftest import Pipeline, decision_for, make_event


def person(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username)
    user.groups.add(*[Group.objects.get(name=name) for name in groups])
    return user


@pytest.fixture
def waiting(pipeline: Pipeline, transactional_db: None) -> ApprovalRequest:
    roles_ensure()
    event = make_event(
        event_id="evt-evidence-1",
        request_type="security",
        requested_action="queue_account_review",
        subject="Suspicious sign-ins",
    )
    pipeline.submit(event, [decision_for(event)])
    return ApprovalRequest.objects.get(run__event_id="evt-evidence-1")


def read(user: User, request_id: int) -> ApprovalRequest:
    found = selectors.request_for(user, request_id)
    assert found is not None
    return found


def test_an_approver_of_its_group_may_decide_and_claim_it(waiting: ApprovalRequest) -> None:
    approver = person("ana", "security-approvers")
    run_comment_add(run_id=waiting.run_id, author=approver, body="Looks real", now=timezone.now())

    page = evidence_page(approval=read(approver, waiting.pk), user=approver)

    assert (page.can_decide, page.may_claim, page.not_yours, page.after) == (True, True, "", None)
    assert page.run.pk == waiting.run_id
    assert page.title_subject == "Suspicious sign-ins"
    assert page.assignable == []  # only a lead gives a request to someone
    assert "Looks real" in str(page.comments)
    assert page.context()["title_subject"] == page.title_subject


def test_a_lead_sees_whom_it_may_be_given_to_but_not_themselves_deciding(
    waiting: ApprovalRequest,
) -> None:
    approver = person("ana", "security-approvers")
    lead = person("lee", "ops-leads")

    page = evidence_page(approval=read(lead, waiting.pk), user=lead)

    assert approver in page.assignable
    assert page.can_decide is False
    assert page.not_yours  # why not, in words


def test_a_decided_request_says_what_the_decision_did(
    waiting: ApprovalRequest, pipeline: Pipeline
) -> None:
    approver = person("ana", "security-approvers")
    approval_decide(
        request_id=waiting.pk,
        user=approver,
        approve=False,
        comment="Not ours",
        seen=waiting.binding(),
    )
    pipeline.drain()

    page = evidence_page(approval=read(approver, waiting.pk), user=approver)

    assert page.after is not None and page.after.text.startswith("Rejected")
    assert page.can_decide is False
    assert page.delegations == []  # only a pending request shows them
