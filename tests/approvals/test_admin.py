"""The admin shows approval records only to those who read every group's requests.

Approvers decide in the console, which shows each of them the requests routed to their
groups; in the admin they see no request, decision or approval row of the audit trail.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest
from approvals.services import approval_decide
from audit.models import AuditEvent
from automation.models import Run
from policy.schemas import PolicyDocument
from policy.services import DEFAULTS_DIR, policy_version_activate, policy_version_create
from tests.conftest import Pipeline, decision_for, make_event


def security_event(event_id: str) -> dict[str, Any]:
    return make_event(
        event_id=event_id, request_type="security", requested_action="queue_account_review"
    )


def staff_client(username: str, *groups: str) -> tuple[User, Client]:
    user = User.objects.create_user(username=username, is_staff=True)
    user.groups.add(*[Group.objects.get(name=name) for name in groups])
    client = Client()
    client.force_login(user)
    return user, client


def route_reviews_to_finance() -> None:
    """policy-2: account reviews go to finance approvers (a request of another group)."""
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data["version"] = "policy-2"
    data["approvals"]["queue_account_review"]["group"] = "finance-approvers"
    policy_version_create(document=PolicyDocument.model_validate(data))
    policy_version_activate(name="policy-2")


@pytest.fixture
def requests(pipeline: Pipeline) -> dict[str, ApprovalRequest]:
    """One request per approving group, the security one with a decision on it."""
    roles_ensure()
    security = security_event("evt-sec")
    pipeline.submit(security, [decision_for(security)])
    route_reviews_to_finance()
    finance = security_event("evt-fin")
    pipeline.submit(finance, [decision_for(finance)])
    found = {r.group: r for r in ApprovalRequest.objects.all()}
    assert set(found) == {"security-approvers", "finance-approvers"}
    decider = User.objects.create_user("ana")
    decider.groups.add(Group.objects.get(name="security-approvers"))
    first = found["security-approvers"]
    with pipeline.capture():
        approval_decide(
            request_id=first.pk, user=decider, approve=False, comment="not us", seen=first.binding()
        )
    pipeline.drain()
    return found


def admin_urls(requests: dict[str, ApprovalRequest]) -> list[str]:
    decision = ApprovalDecision.objects.get()
    return [
        reverse("admin:approvals_approvalrequest_changelist"),
        reverse("admin:approvals_approvaldecision_changelist"),
        reverse("admin:approvals_approvaldecision_change", args=[decision.pk]),
        reverse("admin:app_list", args=["approvals"]),
        *[
            reverse("admin:approvals_approvalrequest_change", args=[r.pk])
            for r in requests.values()
        ],
    ]


@pytest.mark.parametrize("group", ["security-approvers", "finance-approvers"])
def test_approvers_read_no_approval_record_in_the_admin(
    requests: dict[str, ApprovalRequest], group: str
) -> None:
    _, client = staff_client("approver", group)
    finance = requests["finance-approvers"]
    # The console hides another group's request; the admin must not show it either.
    if group == "security-approvers":
        assert client.get(reverse("approvals:evidence", args=[finance.pk])).status_code == 404

    for url in admin_urls(requests):
        answer = client.get(url)
        assert answer.status_code in (403, 404), url
        assert finance.effect_payload["event_id"].encode() not in answer.content
        assert b"not us" not in answer.content
    index = client.get(reverse("admin:index")).content
    assert b"Approval requests" not in index and b"Approval decisions" not in index


@pytest.mark.parametrize("role", ["ops-leads", "auditors", "recovery-staff"])
def test_those_who_read_every_group_keep_read_access(
    requests: dict[str, ApprovalRequest], role: str
) -> None:
    _, client = staff_client("reader", role)

    for url in admin_urls(requests):
        assert client.get(url).status_code == 200, url
    page = client.get(
        reverse("admin:approvals_approvalrequest_change", args=[requests["security-approvers"].pk])
    )
    assert b"not us" in page.content  # the decisions inline
    assert b'name="_save"' not in page.content
    assert b"Approval requests" in client.get(reverse("admin:index")).content


def test_the_trail_hides_approval_rows_from_who_may_not_read_every_group(
    requests: dict[str, ApprovalRequest],
) -> None:
    """Someone given run and audit access by hand, without the approvals-wide permission."""
    user, client = staff_client("partial")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_run", "view_auditevent"])
    )
    run = Run.objects.get(pk=requests["security-approvers"].run_id)
    decision_row = AuditEvent.objects.get(action="approval.reject")
    _, lead = staff_client("lead", "ops-leads")

    run_page = reverse("admin:automation_run_change", args=[run.pk])
    trail = reverse("admin:audit_auditevent_changelist")
    row_page = reverse("admin:audit_auditevent_change", args=[decision_row.pk])
    assert client.get(run_page).status_code == 200
    assert b"approval.reject" not in client.get(run_page).content
    assert b"approval.reject" not in client.get(trail).content
    assert client.get(row_page).status_code in (302, 404)  # "no such row": back to the index
    assert b"run.received" in client.get(trail).content

    assert b"approval.reject" in lead.get(run_page).content
    assert b"approval.reject" in lead.get(trail).content
    assert lead.get(row_page).status_code == 200
