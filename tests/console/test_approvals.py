"""The approver pages: inbox, evidence, decision, raw input; visibility and permissions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from automation.models import Run, State
from tests.catalogues import activate_effects, http_effect
from tests.conftest import Pipeline, decision_for, make_event


def security_event(event_id: str, **overrides: str) -> dict:
    fields = {
        "event_id": event_id,
        "request_type": "security",
        "requested_action": "queue_account_review",
        "subject": "Suspicious sign-ins",
        "body": "Several sign-ins from Lisbon. Queue an account review for AC-20931.",
    }
    return make_event(**{**fields, **overrides})


def with_fields(event: dict) -> dict:
    outcome = decision_for(event, reason_code="security_sensitive")
    outcome["value"]["confidence"] = 0.9
    outcome["value"]["fields"] = {
        "account_reference": {
            "value": "AC-20931",
            "confidence": 0.97,
            "source": "Queue an account review for AC-20931.",
        }
    }
    return outcome


@pytest.fixture
def roles(transactional_db: None) -> None:
    roles_ensure()


def login(username: str, *groups: str) -> tuple[User, Client]:
    user = User.objects.create_user(username=username, password="pw-" + username)
    for name in groups:
        user.groups.add(Group.objects.get(name=name))
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def waiting(pipeline: Pipeline, roles: None) -> ApprovalRequest:
    event = security_event("evt-sec-1")
    pipeline.submit(event, [with_fields(event)])
    return ApprovalRequest.objects.get(run__event_id="evt-sec-1")


def decide(client: Client, request: ApprovalRequest, decision: str, **overrides: str):
    data = {
        "decision": decision,
        "comment": "",
        "seen_fingerprint": request.fingerprint,
        "seen_workflow_version": request.workflow_version,
        "seen_policy_version": request.policy_version,
        "seen_effect": request.effect,
        **overrides,
    }
    return client.post(reverse("approvals:decide", args=[request.pk]), data, follow=True)


def test_inbox_lists_the_request_with_age_sla_and_reason(waiting: ApprovalRequest) -> None:
    _, client = login("ana", "security-approvers")
    page = client.get(reverse("approvals:inbox"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "evt-sec-1" in html
    assert "Queue an account review" in html
    assert "security_sensitive" in html  # the reason code, as secondary text
    assert ">Due<" in html
    assert 'data-testid="nav-inbox-count">1<' in html


def test_evidence_page_shows_fields_highlighted_source_binding_and_timeline(
    waiting: ApprovalRequest,
) -> None:
    _, client = login("ana", "security-approvers")
    html = client.get(reverse("approvals:evidence", args=[waiting.pk])).content.decode()
    assert "<mark>Queue an account review for AC-20931.</mark>" in html
    assert "account_reference" in html and "0.97" in html
    assert waiting.fingerprint in html
    assert "approval.queue_account_review" in html
    assert "recorded-classifier-1" in html and "prompt-1" in html and "policy-1" in html
    assert "enrich" in html and "decide" in html  # the timeline
    assert reverse("approvals:raw", args=[waiting.pk]) in html


def test_raw_input_is_shown_as_text_and_downloaded_as_an_attachment(
    waiting: ApprovalRequest,
) -> None:
    _, client = login("ana", "security-approvers")
    page = client.get(reverse("approvals:raw", args=[waiting.pk])).content.decode()
    raw = bytes(waiting.run.intake.raw)
    assert escape(raw.decode()) in page
    download = reverse("approvals:raw_download", args=[waiting.pk])
    assert f'href="{download}"' in page
    response = client.get(download)
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment; ")
    assert response.content == raw


def test_approving_in_the_console_completes_the_run(
    waiting: ApprovalRequest, pipeline: Pipeline
) -> None:
    user, client = login("ana", "security-approvers")
    with pipeline.capture():
        page = decide(client, waiting, "approve")
    assert "Approved." in page.content.decode()
    pipeline.drain()
    assert Run.objects.get(pk=waiting.run_id).state == State.COMPLETED
    decision = ApprovalDecision.objects.get(request=waiting)
    assert decision.user == user and decision.counted
    assert decision.seen_fingerprint == waiting.fingerprint


def test_reject_without_comment_rerenders_with_the_error(waiting: ApprovalRequest) -> None:
    _, client = login("ana", "security-approvers")
    page = decide(client, waiting, "reject")
    assert page.status_code == 400
    assert "Say why you reject it" in page.content.decode()
    assert not ApprovalDecision.objects.exists()


def test_sending_back_in_the_console_holds_the_run_for_a_correction(
    waiting: ApprovalRequest, pipeline: Pipeline
) -> None:
    _, client = login("ana", "security-approvers")
    assert decide(client, waiting, "send_back").status_code == 400  # it needs its reason
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING

    with pipeline.capture():
        page = decide(client, waiting, "send_back", comment="Not a security case.")
    pipeline.drain()

    assert "Sent back. The ops team corrects the reading" in page.content.decode()
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.SENT_BACK
    run = Run.objects.get(pk=waiting.run_id)
    assert (run.state, run.queue) == (State.NEEDS_REVIEW, "sent_back")
    assert not ApprovalDecision.objects.exists()
    _, lead = login("olga", "ops-leads")
    run_page = lead.get(reverse("runs:run", args=[run.pk])).content.decode()
    assert "Sent back by ana</strong>: Not a security case." in run_page


def test_stale_view_answers_with_a_message_not_an_error(waiting: ApprovalRequest) -> None:
    _, client = login("ana", "security-approvers")
    page = decide(client, waiting, "approve", seen_workflow_version="workflow-0")
    assert page.status_code == 200
    assert "Not used: the request changed" in page.content.decode()
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING


def test_deciding_twice_answers_with_a_message(waiting: ApprovalRequest) -> None:
    _, client = login("ana", "security-approvers")
    decide(client, waiting, "approve")
    page = decide(client, waiting, "approve")
    assert page.status_code == 200
    assert "already approved" in page.content.decode()


def test_user_without_permission_gets_403_for_inbox_and_decision(
    waiting: ApprovalRequest,
) -> None:
    _, client = login("nobody")
    assert client.get(reverse("approvals:inbox")).status_code == 403
    assert decide(client, waiting, "approve").status_code == 403
    assert not ApprovalDecision.objects.exists()


def test_approver_of_another_group_cannot_see_or_decide(waiting: ApprovalRequest) -> None:
    _, client = login("fin", "finance-approvers")
    assert client.get(reverse("approvals:evidence", args=[waiting.pk])).status_code == 404
    assert decide(client, waiting, "approve").status_code == 404
    inbox = client.get(reverse("approvals:inbox"), {"scope": "all"}).content.decode()
    assert "evt-sec-1" not in inbox


def test_auditor_sees_every_request_but_cannot_decide(waiting: ApprovalRequest) -> None:
    _, client = login("aud", "auditors")
    inbox = client.get(reverse("approvals:inbox"), {"scope": "all"}).content.decode()
    assert "evt-sec-1" in inbox
    page = client.get(reverse("approvals:evidence", args=[waiting.pk])).content.decode()
    assert 'data-testid="cannot-decide"' in page
    assert decide(client, waiting, "approve").status_code == 403


def test_request_text_is_escaped(pipeline: Pipeline, roles: None) -> None:
    event = security_event("evt-xss", body="<script>alert(1)</script> Queue a review.")
    pipeline.submit(event, [decision_for(event, reason_code="security_sensitive")])
    request = ApprovalRequest.objects.get(run__event_id="evt-xss")
    _, client = login("ana", "security-approvers")
    page = client.get(reverse("approvals:evidence", args=[request.pk]))
    assert b"<script>alert(1)</script>" not in page.content
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in page.content
    assert "script-src 'self'" in page["Content-Security-Policy"]


def test_what_will_be_sent_shows_the_payload_when_the_effect_has_no_body_template(
    pipeline: Pipeline, roles: None
) -> None:
    # An http effect without a body template posts the effect's payload itself: the
    # approver sees that JSON, not a sentence about it.
    activate_effects({"queue_account_review": http_effect("https://reviews.example.com/queue")})
    event = security_event("evt-sec-nobody")
    pipeline.submit(event, [with_fields(event)])
    request = ApprovalRequest.objects.get(run__event_id="evt-sec-nobody")
    assert "body" not in request.effect_payload["request"]
    _, client = login("ana", "security-approvers")
    html = client.get(reverse("approvals:evidence", args=[request.pk])).content.decode()
    shown = html.split('data-testid="effect-request"', 1)[1].split("</div>", 1)[0]
    assert "POST https://reviews.example.com/queue" in shown
    assert escape('"event_id": "evt-sec-nobody"') in shown
    assert escape('"account_reference": "AC-20931"') in shown
