"""Every free-text input has a limit, stated at the field and enforced by the server.

An approval comment of 20,000 characters was accepted and shown in full; a correction's
reason had no limit at all. Each input a person types a comment, reason or note into says
"At most 2,000 characters." beside it (4,000 for the evidence of work done by hand), the
browser is told the same (`maxlength`), and the forms and the services refuse more.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from approvals.models import ApprovalDecision, ApprovalRequest
from approvals.services import approval_decide
from automation.classifiers.quality import qa_correct
from automation.models import QAReview, RecoveryAction, Run
from automation.pipeline.operations import run_reconsider
from automation.recovery.services import run_resolve, run_retry
from core.errors import ServiceError
from policy.schemas import PolicyDocument
from policy.services import DEFAULTS_DIR, parse_policy_text
from tests.automation.classifiers.test_quality import sampling, straight_through
from tests.automation.recovery.test_recovery import exhausted, person
from tests.conftest import Pipeline, _user, make_event
from tests.console.test_approvals import security_event, with_fields

TOO_LONG = "x" * 20_000
FREE_TEXT = {"comment", "reason", "note", "evidence"}


class _Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag in ("input", "textarea") and named.get("name") in FREE_TEXT:
            self.found.append(named)


def free_text_inputs(page: str) -> list[dict[str, str | None]]:
    parser = _Inputs()
    parser.feed(page)
    return parser.found


def assert_limited(client: Client, url: str, *names: str) -> None:
    """The page's free-text inputs are exactly `names`, each with a maxlength that the page
    states in words."""
    response = client.get(url)
    assert response.status_code == 200, url
    page = response.content.decode()
    inputs = free_text_inputs(page)
    assert sorted({str(i["name"]) for i in inputs}) == sorted(names), url
    for found in inputs:
        limit = found.get("maxlength")
        assert limit, f"{url}: {found['name']} has no maxlength"
        stated = re.search(rf"at most {int(limit):,} characters", page, re.IGNORECASE)
        assert stated, f"{url}: the limit of {found['name']} is not stated"


@pytest.fixture
def lead(db: None) -> User:
    return person("lee", "ops-leads")


def lead_client(lead: User) -> Client:
    client = Client()
    client.force_login(lead)
    return client


def test_the_run_queue_correction_and_preview_pages_state_their_limits(
    pipeline: Pipeline, lead: User
) -> None:
    held = exhausted(pipeline)
    client = lead_client(lead)

    assert_limited(client, reverse("runs:run", args=[held.pk]), "reason", "evidence")
    assert_limited(client, reverse("queues:queue", args=[held.queue]), "reason")
    assert_limited(client, reverse("runs:correct", args=[held.pk]), "reason")
    event = make_event(event_id="evt-done")
    done = pipeline.run(pipeline.submit(event, [with_fields(event)]))
    assert_limited(client, reverse("runs:preview", args=[done.pk, "replay"]), "reason")


def test_the_policy_editor_states_its_limits(pipeline: Pipeline, lead: User) -> None:
    client = lead_client(lead)
    url = reverse("policy:new") + "?from=default-1"  # a version with signals
    page = client.get(url).content.decode()

    assert_limited(client, url, "note")
    assert re.search(r'name="document"[^>]*maxlength="100000"', page)
    assert "At most 100,000 characters." in page
    assert "each of at most 200 characters" in page  # a signal's phrases


def test_the_qa_pages_state_their_limits(pipeline: Pipeline, lead: User) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa")
    reviewer = _user("quinn", "qa-desk")
    review = QAReview.objects.get(run=run)
    client = lead_client(reviewer)
    assert_limited(client, reverse("quality:review", args=[review.pk]), "note")
    qa_correct(review_id=review.pk, user=reviewer, category="billing", effect="create_follow_up")
    assert_limited(lead_client(lead), reverse("quality:reconcile_queue"), "note")


def test_a_comment_of_20000_characters_is_refused_and_not_shown(pipeline: Pipeline) -> None:
    event = security_event("evt-sec-long")
    pipeline.submit(event, [with_fields(event)])
    request = ApprovalRequest.objects.get(run__event_id="evt-sec-long")
    ana = person("ana", "security-approvers")
    client = lead_client(ana)
    assert_limited(client, reverse("approvals:evidence", args=[request.pk]), "comment")
    form = {
        "decision": "reject",
        "comment": TOO_LONG,
        "seen_fingerprint": request.fingerprint,
        "seen_workflow_version": request.workflow_version,
        "seen_policy_version": request.policy_version,
        "seen_effect": request.effect,
    }

    answer = client.post(reverse("approvals:decide", args=[request.pk]), form)

    assert answer.status_code == 400
    assert "Too long: at most 2,000 characters, and this has 20000." in answer.content.decode()
    with pytest.raises(ServiceError) as refused:
        approval_decide(
            request_id=request.pk,
            user=ana,
            approve=False,
            comment=TOO_LONG,
            seen=request.binding(),
        )
    assert refused.value.code == "too_long"
    assert "20,000 characters long: at most 2,000 characters" in refused.value.message
    assert not ApprovalDecision.objects.exists()


def test_the_services_refuse_a_reason_or_note_over_its_limit(
    pipeline: Pipeline, lead: User
) -> None:
    held = exhausted(pipeline)
    refusals = {
        "retry": lambda: run_retry(run_id=held.pk, user=lead, reason=TOO_LONG),
        "abandon": lambda: run_resolve(
            run_id=held.pk, user=lead, reason="r", evidence="e" * 4001, done=False
        ),
        "re-decide": lambda: run_reconsider(run_id=held.pk, user=lead, reason=TOO_LONG),
    }
    for name, refused_call in refusals.items():
        with pytest.raises(ServiceError) as refused:
            refused_call()
        assert refused.value.code == "too_long", name
    assert Run.objects.get(pk=held.pk).state == held.state
    assert not RecoveryAction.objects.filter(run=held).exists()
    answer = lead_client(lead).post(
        reverse("runs:recover", args=[held.pk, "retry"]), {"reason": TOO_LONG}, follow=True
    )
    shown = [str(m) for m in answer.context["messages"]]
    assert shown == [
        "Retry the classifier: not done. "
        "Reason: Too long: at most 2,000 characters, and this has 20000."
    ]


def test_a_policy_note_over_its_limit_is_refused_by_the_schema() -> None:
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    document = parse_policy_text(text).model_dump(mode="json")
    with pytest.raises(ValueError, match="at most 2000 characters"):
        PolicyDocument.model_validate({**document, "note": TOO_LONG})
