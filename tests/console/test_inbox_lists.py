"""The approvals inbox as a list people work from: what each row says, in which order, the
reason that asked for a person, the evidence page's words; a fixed number of queries."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals import selectors
from approvals.models import ApprovalRequest
from console.templatetags.lists import rule_sentence
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event
from tests.html_rows import Row, rows

INBOX = reverse("approvals:inbox")
# The inbox's columns, in order.
REQUEST, FROM, AMOUNT, ROUTE, WAITING, SLA, ROUTED_TO, WHY, APPROVALS = range(9)


def person(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username)
    user.groups.add(*[Group.objects.get(name=g) for g in groups])
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ana(pipeline: Pipeline) -> User:
    roles_ensure()
    return person("ana", "security-approvers")


def waiting(pipeline: Pipeline, number: int, **event: Any) -> ApprovalRequest:
    """A security request waiting for the security approvers."""
    fields = {
        "event_id": f"evt-sec-{number}",
        "request_type": "security",
        "requested_action": "queue_account_review",
        "subject": f"Suspicious sign-ins {number}",
        **event,
    }
    sent = make_event(**fields)
    reading = decision_for(sent, reason_code="security_sensitive")
    pipeline.submit(sent, [reading])
    return ApprovalRequest.objects.get(run__event_id=fields["event_id"])


@pytest.fixture
def amount_policy(pipeline: Pipeline) -> None:
    """policy-1 with an approval above 10000 for standard accounts, by finance approvers."""
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data["version"] = "limits-1"
    data["amount_limits"] = {"standard": {"approval_above": "10000"}}
    data["amount_approval"] = {"group": "finance-approvers"}
    policy_version_create(document=parse_policy_text(yaml.safe_dump(data)))
    policy_version_activate(name="limits-1")


def over_the_limit(
    pipeline: Pipeline, amount: str = "12000 EUR", event_id: str = "evt-refund"
) -> ApprovalRequest:
    """A finance notification of 12000 EUR, read by the heuristic's reason code."""
    event = make_event(
        event_id=event_id,
        request_type="billing",
        requested_action="send_internal_notification",
        subject="Refund for order 5512",
        body="Please refund 12000 EUR for order 5512.",
    )
    reading = decision_for(event, reason_code="billing_keywords")
    reading["value"]["fields"] = {"amount": {"value": amount, "confidence": 0.9, "source": amount}}
    pipeline.submit(event, [reading])
    return ApprovalRequest.objects.get(run__event_id=event_id)


def inbox_rows(client: Client, query: str = "") -> list[Row]:
    response = client.get(INBOX + query)
    assert response.status_code == 200
    return rows(response.content.decode(), "inbox-row-")


def event_ids(found: list[Row]) -> list[str]:
    return [re.findall(r"evt-sec-\d+", row.cells[REQUEST].text)[0] for row in found]


# --- the columns -----------------------------------------------------------------------------


def test_a_row_says_what_who_how_much_where_how_long_and_who_decides(
    pipeline: Pipeline, ana: User
) -> None:
    request = waiting(pipeline, 1)
    ApprovalRequest.objects.filter(pk=request.pk).update(
        escalate_at=timezone.now() + timedelta(hours=5, minutes=30)
    )

    (row,) = inbox_rows(client_for(ana))
    cells = row.cells

    assert cells[REQUEST].primary == "Queue an account review: Suspicious sign-ins 1"
    assert cells[REQUEST].text.endswith(f"#{request.pk} · evt-sec-1")
    assert cells[FROM].text == "—"  # a web form names no sender, and no customer was found
    assert cells[AMOUNT].text == "—"
    assert cells[ROUTE].text == "Security review"
    assert cells[SLA].text == "Due in 5 hours"
    assert cells[ROUTED_TO].text == "Security approvers"
    assert cells[APPROVALS].text == "0 of 1"


def test_an_overdue_request_says_by_how_much_and_an_escalated_one_to_whom(
    pipeline: Pipeline, ana: User
) -> None:
    late = waiting(pipeline, 1)
    escalated = waiting(pipeline, 2)
    now = timezone.now()
    ApprovalRequest.objects.filter(pk=late.pk).update(escalate_at=now - timedelta(days=2, hours=1))
    ApprovalRequest.objects.filter(pk=escalated.pk).update(
        escalate_at=now - timedelta(hours=3), escalated_at=now - timedelta(hours=3)
    )
    lead = User.objects.create_superuser("root")

    first, second = inbox_rows(client_for(lead), "?scope=all")

    assert first.cells[SLA].text == "Overdue by 2 days"
    assert second.cells[SLA].text == "Escalated by 3 hours"
    assert second.cells[ROUTED_TO].text == "Ops leads"


def test_the_sender_or_customer_and_the_amount_come_from_the_run(
    pipeline: Pipeline, amount_policy: None
) -> None:
    roles_ensure()
    request = over_the_limit(pipeline)
    fin = person("fin", "finance-approvers")

    (row,) = inbox_rows(client_for(fin))

    assert row.cells[REQUEST].primary == "Notify the team: Refund for order 5512"
    assert row.cells[AMOUNT].text == "12,000.00 EUR"
    assert row.cells[ROUTE].text == "Finance"
    assert row.cells[ROUTED_TO].text == "Finance approvers"
    assert request.group == "finance-approvers"


def test_each_amount_is_written_one_way_in_its_own_currency(
    pipeline: Pipeline, amount_policy: None
) -> None:
    """Reported: one column showed "12,400.00 EUR" and "12 400,00 SEK" side by side."""
    roles_ensure()
    over_the_limit(pipeline, "12,400.00 EUR", "evt-euros")
    over_the_limit(pipeline, "12 400,00 SEK", "evt-kronor")
    over_the_limit(pipeline, "12400", "evt-unsaid")

    found = inbox_rows(client_for(person("fin", "finance-approvers")))

    assert [row.cells[AMOUNT].text for row in found] == [
        "12,400.00 EUR",
        "12,400.00 SEK",
        "12,400.00",
    ]


def test_the_why_of_an_amount_approval_is_the_amount_rule_with_the_code_aside(
    pipeline: Pipeline, amount_policy: None
) -> None:
    """Reported: the reason read "billing_keywords: ..." (the reader's code first) instead of
    the rule that asked for a person."""
    roles_ensure()
    request = over_the_limit(pipeline)
    client = client_for(person("fin", "finance-approvers"))

    (row,) = inbox_rows(client)
    evidence = client.get(reverse("approvals:evidence", args=[request.pk])).content.decode()

    why = row.cells[WHY]
    assert why.primary == "Amount 12000 is over 10000: a person approves it for standard accounts"
    assert why.text == why.primary + " billing_keywords"  # the code, as secondary text only
    assert "Amount 12000 is over 10000: a person approves it for standard accounts" in evidence


def test_the_why_of_an_effects_own_approval_names_the_effect_and_the_group_in_words(
    pipeline: Pipeline, ana: User
) -> None:
    waiting(pipeline, 1)

    (row,) = inbox_rows(client_for(ana))

    assert row.cells[WHY].primary == (
        "Queue an account review needs 1 approval from Security approvers"
    )


def test_the_reason_rule_is_the_one_that_did_not_pass() -> None:
    request = ApprovalRequest(
        evidence={
            "reason_code": "billing_keywords",
            "rules": [
                {"rule_id": "approval.create_follow_up", "passed": True, "text": "needs one"},
                {"rule_id": "amount.standard.approval", "passed": False, "text": "over it"},
            ],
        }
    )
    assert selectors._reason_rule(request) == request.evidence["rules"][1]
    assert selectors._reason_rule(ApprovalRequest(evidence={})) is None


def test_the_evidence_page_is_titled_by_the_effect_and_the_subject_in_words(
    pipeline: Pipeline, ana: User
) -> None:
    """Reported: the title read "queue_account_review for evt-sec-1"."""
    request = waiting(pipeline, 1)

    page = client_for(ana).get(reverse("approvals:evidence", args=[request.pk])).content.decode()

    title = re.search(r"<h1>(.*?)</h1>", page, re.S)
    assert title is not None
    assert title.group(1).strip() == "Queue an account review for Suspicious sign-ins 1"
    assert 'data-testid="request-status" title="Nobody has decided yet.">Waiting<' in page
    assert ">Waiting for approval</strong>" in page  # the run's state
    assert "Route</th><td>Security review" in page


def test_no_cell_of_the_inbox_shows_a_code_as_its_words(pipeline: Pipeline, ana: User) -> None:
    waiting(pipeline, 1)

    (row,) = inbox_rows(client_for(ana))

    for cell in row.cells:
        assert not re.search(r"\b[a-z]+_[a-z_]+\b", cell.primary), cell.primary


# --- order and pages -----------------------------------------------------------------------


def follow(client: Client, page: str, rel: str) -> str | None:
    found = re.search(rf'href="(\?[^"]*)" rel="{rel}"', page)
    if found is None:
        return None
    return client.get(INBOX + found.group(1).replace("&amp;", "&")).content.decode()


def ids_on(page: str) -> list[str]:
    return event_ids(rows(page, "inbox-row-"))


@pytest.mark.parametrize(
    ("order", "pages"),
    [
        ("oldest", [["evt-sec-0", "evt-sec-1"], ["evt-sec-2", "evt-sec-3"], ["evt-sec-4"]]),
        ("newest", [["evt-sec-4", "evt-sec-3"], ["evt-sec-2", "evt-sec-1"], ["evt-sec-0"]]),
    ],
)
def test_the_inbox_pages_by_cursor_in_either_order(
    pipeline: Pipeline,
    ana: User,
    monkeypatch: pytest.MonkeyPatch,
    order: str,
    pages: list[list[str]],
) -> None:
    monkeypatch.setattr(selectors, "INBOX_LIMIT", 2)
    for number in range(5):
        waiting(pipeline, number)
    client = client_for(ana)

    page: str | None = client.get(INBOX, {"order": order, "scope": "mine"}).content.decode()
    seen = []
    while page is not None:
        seen.append(ids_on(page))
        last, page = page, follow(client, page, "next")

    assert seen == pages
    back = follow(client, last, "prev")
    assert back is not None and ids_on(back) == pages[1]
    assert "scope=mine" in re.findall(r'href="([^"]*)" rel="prev"', last)[0]


def test_the_sort_header_is_a_link_that_keeps_the_filters(pipeline: Pipeline, ana: User) -> None:
    waiting(pipeline, 1)
    client = client_for(ana)

    oldest = client.get(INBOX, {"scope": "groups", "overdue": "", "after": "1.1"})
    link = re.search(r'<a href="([^"]*)" data-testid="sort-waiting"', oldest.content.decode())
    assert link is not None
    newest = link.group(1).replace("&amp;", "&")

    assert newest == "?scope=groups&overdue=&order=newest"  # the page position is dropped
    back = client.get(INBOX + newest).content.decode()
    assert 'href="?scope=groups&amp;overdue=&amp;order=oldest" data-testid="sort-waiting"' in back
    assert "newest first" in back


def test_newest_first_reads_the_pending_index_backwards(pipeline: Pipeline, ana: User) -> None:
    for number in range(3):
        waiting(pipeline, number)
    with CaptureQueriesContext(connection) as captured:
        selectors.inbox_page(
            user=ana, scope="mine", overdue_only=False, now=timezone.now(), newest_first=True
        )
    page_sql = next(q["sql"] for q in captured.captured_queries if "LIMIT 51" in q["sql"])

    assert 'ORDER BY "approvals_approvalrequest"."created_at" DESC' in page_sql
    assert '"automation_run"."normalized" ->' in page_sql  # the keys, not the document
    selected = page_sql.split(" FROM ")[0]
    assert '"automation_run"."normalized",' not in selected + ","
    assert '"automation_run"."classification"' not in selected


# --- queries ---------------------------------------------------------------------------------


def count_queries(client: Client, url: str) -> int:
    client.get(url)  # sessions and permission caches warm, as in use
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.parametrize("query", ["", "?order=newest", "?scope=all&order=newest"])
def test_the_inbox_makes_as_many_queries_for_many_rows_as_for_few(
    pipeline: Pipeline, ana: User, query: str
) -> None:
    waiting(pipeline, 0)
    client = client_for(ana)
    few = count_queries(client, INBOX + query)
    for number in range(1, 6):
        waiting(pipeline, number)

    assert count_queries(client, INBOX + query) == few
    assert len(inbox_rows(client, query)) == 6


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "signal account_compromise (v1, hold): 'hacked' in “My account was hacked.”",
            "Risk signal “Account compromise”: 'hacked' in “My account was hacked.”",
        ),
        (
            "'create_follow_up' needs 2 approvals from 'finance-approvers'",
            "Create a follow-up needs 2 approvals from Finance approvers",
        ),
        ("amount 5 is over 1: a person approves it", "Amount 5 is over 1: a person approves it"),
        (
            "category 'billing' must equal request type 'support'",
            "Category “Billing” must equal request type “Support”",
        ),
    ],
)
def test_a_rules_text_reads_with_its_codes_in_words(db: None, text: str, said: str) -> None:
    # The business's codes are said in its catalogue's words: with no version stored, the
    # reference catalogue's.
    assert rule_sentence(text) == said
