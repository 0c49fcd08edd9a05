"""Deciding several requests at once from the inbox: each on the binding its row showed,
re-checked at the moment of the decision; a stale one skipped and reported, never decided;
only what policy allows (one approver, no risk signal)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from approvals.services import approvals_decide_bulk
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event


def bulk_policy(*, approvers: int = 1) -> None:
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", "version: policy-bulk")
    text = text.replace("    approvers: 1\n", f"    approvers: {approvers}\n    bulk: true\n")
    document = parse_policy_text(text)
    assert document.approvals["queue_account_review"].bulk
    policy_version_create(document=document)
    policy_version_activate(name="policy-bulk")


def waiting(pipeline: Pipeline, event_id: str) -> ApprovalRequest:
    event = make_event(
        event_id=event_id, request_type="security", requested_action="queue_account_review"
    )
    pipeline.submit(event, [decision_for(event, reason_code="security_sensitive")])
    return ApprovalRequest.objects.get(run__event_id=event_id)


@pytest.fixture
def ana(pipeline: Pipeline) -> User:
    roles_ensure()
    user = User.objects.create_user(username="ana", password="pw-ana")
    user.groups.add(Group.objects.get(name="security-approvers"))
    return user


def test_each_is_decided_on_its_own_binding_and_a_stale_one_is_skipped(
    pipeline: Pipeline, ana: User
) -> None:
    bulk_policy()
    requests = [waiting(pipeline, f"evt-bulk-{n}") for n in range(3)]
    seen = {r.pk: r.binding() for r in requests}
    stale = requests[1]
    seen[stale.pk] = replace(stale.binding(), fingerprint="0" * 64)  # changed since shown

    with pipeline.capture():
        results = approvals_decide_bulk(seen=seen, user=ana, approve=True)
    pipeline.drain()

    codes = {r.request_id: r.code for r in results}
    assert codes[requests[0].pk] == codes[requests[2].pk] == ApprovalStatus.APPROVED
    assert codes[stale.pk] == "approval_stale"
    stale.refresh_from_db()
    assert stale.status == ApprovalStatus.PENDING
    assert not ApprovalDecision.objects.filter(request=stale).exists()  # never decided


def test_not_offered_nor_decided_without_policy_or_with_two_approvers(
    pipeline: Pipeline, ana: User
) -> None:
    plain = waiting(pipeline, "evt-plain")  # policy-1: no bulk
    results = approvals_decide_bulk(seen={plain.pk: plain.binding()}, user=ana, approve=True)
    assert results[0].message.startswith("skipped: policy asks")
    bulk_policy(approvers=2)
    two = waiting(pipeline, "evt-two")
    results = approvals_decide_bulk(seen={two.pk: two.binding()}, user=ana, approve=True)
    assert results[0].message == "skipped: it needs more than one approver"
    assert not ApprovalDecision.objects.exists()
    client = Client()
    client.force_login(ana)
    page = client.get(reverse("approvals:inbox")).content.decode()
    assert "Approve selected" not in page


def test_nor_rejected_without_policy_or_with_two_approvers(pipeline: Pipeline, ana: User) -> None:
    """A bulk rejection obeys the same rules as a bulk approval: it used to decide requests
    policy asks to be decided one at a time, and close a two-approver request at once."""
    plain = waiting(pipeline, "evt-plain")  # policy-1: no bulk
    results = approvals_decide_bulk(
        seen={plain.pk: plain.binding()}, user=ana, approve=False, comment="no"
    )
    assert (results[0].code, results[0].message) == (
        "forbidden",
        "skipped: policy asks for this effect's requests to be decided one at a time",
    )
    bulk_policy(approvers=2)
    two = waiting(pipeline, "evt-two")
    results = approvals_decide_bulk(
        seen={two.pk: two.binding()}, user=ana, approve=False, comment="no"
    )
    assert results[0].message == "skipped: it needs more than one approver"
    assert not ApprovalDecision.objects.exists()
    assert {r.status for r in ApprovalRequest.objects.all()} == {ApprovalStatus.PENDING}


def test_the_inbox_offers_it_and_the_result_page_lists_each(pipeline: Pipeline, ana: User) -> None:
    bulk_policy()
    requests = [waiting(pipeline, f"evt-page-{n}") for n in range(2)]
    client = Client()
    client.force_login(ana)
    page = client.get(reverse("approvals:inbox")).content.decode()
    assert "Approve selected" in page and page.count('name="request"') == 2
    form = {"decision": "reject", "comment": "not ours", "request": [r.pk for r in requests]}
    form |= {f"seen-{r.pk}": "|".join(r.binding().as_dict().values()) for r in requests}
    with pipeline.capture():
        answer = client.post(reverse("approvals:bulk"), form)
    pipeline.drain()
    assert answer.status_code == 200
    text = answer.content.decode()
    assert "<strong>2</strong> decided, <strong>0</strong> skipped" in text
    assert all(
        r.status == ApprovalStatus.REJECTED
        for r in ApprovalRequest.objects.filter(pk__in=[r.pk for r in requests])
    )
    # A rejection without a comment is refused before anything is decided.
    again = client.post(reverse("approvals:bulk"), {**form, "comment": ""}, follow=True)
    assert "A rejection needs a comment" in again.content.decode()


@pytest.mark.parametrize("number", ["\u00b2", "\u0661", "\uff15"])
def test_a_request_named_in_another_scripts_digits_is_no_request(
    pipeline: Pipeline, ana: User, number: str
) -> None:
    """A superscript two passes isdigit() and int() refuses it (a 500); int() reads an
    Arabic-Indic one and a full-width five as 1 and 5, so a look-alike would name another
    request or person. Each is no number at all."""
    bulk_policy()
    request = waiting(pipeline, "evt-digits")
    lead = User.objects.create_superuser("lead", "lead@example.com", None)
    client = Client()
    client.force_login(ana)
    form = {"decision": "approve", "comment": "", "request": [number, request.pk]}
    form |= {
        f"seen-{n}": "|".join(request.binding().as_dict().values()) for n in (number, request.pk)
    }

    answer = client.post(reverse("approvals:bulk"), form)

    assert answer.status_code == 200
    assert "<strong>1</strong> decided" in answer.content.decode()
    client.force_login(lead)
    other = waiting(pipeline, "evt-digits-2")
    given = client.post(reverse("approvals:hand", args=[other.pk, "assign"]), {"person": number})
    assert given.status_code == 302
    other.refresh_from_db()
    assert other.assignee is None
