"""The comment thread on the run page and on a request's evidence page: written through the
form, shown oldest first, escaped, mentions marked, and in the run's history."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from audit.models import AuditAction, AuditEvent
from automation.models import Run, RunComment
from tests.conftest import Pipeline, decision_for, make_event


def login(username: str, *groups: str) -> tuple[User, Client]:
    user = User.objects.create_user(username=username)
    user.groups.add(*Group.objects.filter(name__in=groups))
    client = Client()
    client.force_login(user)
    return user, client


@pytest.fixture
def request_waiting(pipeline: Pipeline) -> ApprovalRequest:
    roles_ensure()
    event = make_event(
        event_id="evt-sec-1", request_type="security", requested_action="queue_account_review"
    )
    pipeline.submit(event, [decision_for(event)])
    return ApprovalRequest.objects.select_related("run").get(run__event_id="evt-sec-1")


def run_url(run: Run) -> str:
    return reverse("runs:run", args=[run.pk])


def evidence_url(request: ApprovalRequest) -> str:
    return reverse("approvals:evidence", args=[request.pk])


def post(client: Client, run: Run, body: str, back: str = "") -> object:
    data = {"body": body, "next": back} if back else {"body": body}
    return client.post(reverse("runs:comment", args=[run.pk]), data)


def test_an_ops_lead_comments_on_the_run_page_and_comes_back_to_the_thread(
    request_waiting: ApprovalRequest,
) -> None:
    run = request_waiting.run
    _, lead = login("lee", "ops-leads")

    answer = post(lead, run, "Checked the account.\nLooks fine.", back=run_url(run))

    assert answer.status_code == 302 and answer["Location"] == run_url(run) + "#comments"
    page = lead.get(run_url(run)).content.decode()
    assert "Comment added to the run&#x27;s thread." in page
    assert 'data-testid="comments"' in page and "Add comment" in page
    assert "Checked the account.\nLooks fine." in page  # line breaks kept (pre-wrap)
    comment = RunComment.objects.get()
    assert f'id="comment-{comment.pk}"' in page and "<strong>lee</strong>" in page
    assert comment.created_at.strftime("%Y-%m-%d %H:%M") + " UTC" in page


def test_an_approver_comments_on_the_evidence_page_and_it_shows_on_both_pages(
    request_waiting: ApprovalRequest,
) -> None:
    run = request_waiting.run
    login("lee", "ops-leads")
    _, approver = login("ana", "security-approvers")

    answer = post(
        approver, run, "@lee is this customer known to us?", back=evidence_url(request_waiting)
    )

    assert answer["Location"] == evidence_url(request_waiting) + "#comments"
    mark = '<mark class="mention">@lee</mark> is this customer known to us?'
    assert mark in approver.get(evidence_url(request_waiting)).content.decode()
    assert mark in approver.get(run_url(run)).content.decode()


def test_the_thread_is_oldest_first_and_in_the_history_as_a_link(
    request_waiting: ApprovalRequest,
) -> None:
    run = request_waiting.run
    _, lead = login("lee", "ops-leads")
    post(lead, run, "First.")
    post(lead, run, "Second.")

    page = lead.get(run_url(run)).content.decode()

    assert page.index("First.") < page.index("Second.")
    first, second = RunComment.objects.order_by("pk")
    assert f'<a href="#comment-{first.pk}">comment by lee</a>' in page
    assert f'<a href="#comment-{second.pk}">comment by lee</a>' in page
    evidence = lead.get(evidence_url(request_waiting)).content.decode()
    assert f'<a href="#comment-{first.pk}">comment by lee</a>' in evidence


def test_html_in_a_comment_is_shown_as_text(request_waiting: ApprovalRequest) -> None:
    run = request_waiting.run
    _, lead = login("lee", "ops-leads")

    post(lead, run, "<script>alert('x')</script> <b>bold</b> @ops-leads")

    page = lead.get(run_url(run)).content.decode()
    assert "<script>alert" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &lt;b&gt;bold&lt;/b&gt; " in page
    assert '<mark class="mention">@ops-leads</mark>' in page


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("   ", "Comment not added: Write something: the comment is empty."),
        ("x" * 4001, "Comment not added: The comment is 4,001 characters long: at most 4,000"),
    ],
)
def test_an_empty_or_too_long_comment_is_refused_with_a_message_and_nothing_written(
    request_waiting: ApprovalRequest, body: str, said: str
) -> None:
    run = request_waiting.run
    _, lead = login("lee", "ops-leads")

    answer = lead.post(reverse("runs:comment", args=[run.pk]), {"body": body}, follow=True)

    assert answer.status_code == 200
    assert said in answer.content.decode()
    assert not RunComment.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditAction.RUN_COMMENTED).exists()


@pytest.mark.parametrize("groups", [("finance-approvers",), ()])
def test_whoever_may_not_read_the_run_gets_the_forbidden_page_and_nothing_is_written(
    request_waiting: ApprovalRequest, groups: tuple[str, ...]
) -> None:
    _, outsider = login("fin", *groups)

    answer = post(outsider, request_waiting.run, "Let me in.")

    assert answer.status_code == 403
    assert not RunComment.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditAction.RUN_COMMENTED).exists()


def test_the_form_never_sends_a_person_to_another_site(request_waiting: ApprovalRequest) -> None:
    run = request_waiting.run
    _, lead = login("lee", "ops-leads")

    answer = post(lead, run, "Noted.", back="https://elsewhere.example/")

    assert answer["Location"] == run_url(run) + "#comments"
