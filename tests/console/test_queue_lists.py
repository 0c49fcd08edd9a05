"""A queue as a list people work from: what each row says, in which order, why a run is held
in plain words, claiming many runs at once; a fixed number of queries whatever the rows."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.intake.services import MAIL_TYPE, intake_submit
from automation.models import Outcome, RecoveryAction, Run
from automation.recovery.selectors import QueueFilters, queue_items
from automation.recovery.services import CLAIM_MANY_LIMIT, queue_claim, queue_claim_many
from core.errors import ServiceError
from core.keyset import NEWEST
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event
from tests.console.test_page_queries import clone_runs, plan
from tests.history_rows import rewrite
from tests.html_rows import Row, rows

# A queue's columns for someone who may work it, in order.
SELECT, RUN, FROM, AMOUNT, ROUTE, HELD, SLA, WHY, OWNER = range(9)


def person(username: str, *groups: str) -> User:
    roles_ensure()
    user = User.objects.create_user(username)
    user.groups.add(*[Group.objects.get(name=g) for g in groups])
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def exhausted(pipeline: Pipeline, number: int) -> Run:
    """A run held as retry_exhausted (the test channel allows two classifier attempts)."""
    event = make_event(event_id=f"evt-held-{number}", subject=f"Access question {number}")
    return pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT]))


def held_mail(pipeline: Pipeline) -> Run:
    """An e-mail held as retry_exhausted: it names its sender."""
    message = EmailMessage()
    message["From"] = "Dana Ortiz <dana@example.org>"
    message["To"] = "support@gatehouse.test"
    message["Subject"] = "Refund for order 5512"
    message["Message-ID"] = "<refund-5512@example.org>"
    message.set_content("Please refund order 5512.")
    pipeline.record("refund-5512@example.org", [TIMEOUT, TIMEOUT])
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel, raw=message.as_bytes(), content_type=MAIL_TYPE, source="t"
        )
    pipeline.drain()
    return pipeline.run(result)


@pytest.fixture
def confidence_threshold(pipeline: Pipeline) -> None:
    """policy-1 with a confidence threshold of 0.8, made active."""
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", "version: policy-2")
    text = text.replace("  default: 0.0\n", "  default: 0.8\n")
    policy_version_create(document=parse_policy_text(text))
    policy_version_activate(name="policy-2")


def unsure(pipeline: Pipeline) -> Run:
    """A billing notification of 1,250.00 EUR read with confidence 0.5: held."""
    event = make_event(
        event_id="evt-unsure",
        request_type="billing",
        requested_action="send_internal_notification",
        subject="Invoice 4471",
    )
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.5
    reading["value"]["fields"] = {"amount": {"value": "1,250.00 EUR", "confidence": 0.9}}
    return pipeline.run(pipeline.submit(event, [reading]))


def queue_rows(client: Client, queue: str, query: str = "") -> list[Row]:
    response = client.get(reverse("queues:queue", args=[queue]) + query)
    assert response.status_code == 200
    return rows(response.content.decode(), "queue-row-")


@pytest.fixture
def lee(pipeline: Pipeline) -> User:
    return person("lee", "ops-leads")


def test_a_name_that_is_no_queue_is_a_404_and_an_empty_queue_is_a_page(lee: User) -> None:
    client = client_for(lee)
    for name in ("nonexistent", "completed", "invalid_event", "needs_review"):
        assert client.get(reverse("queues:queue", args=[name])).status_code == 404, name
    batch = client.post(reverse("queues:batch_new", args=["nonexistent"]))
    assert batch.status_code == 404
    empty = client.get(reverse("queues:queue", args=[Outcome.LOW_CONFIDENCE]))
    assert empty.status_code == 200


# --- the columns -----------------------------------------------------------------------------


def test_a_row_says_what_who_where_how_long_whose_and_the_sla(
    pipeline: Pipeline, lee: User
) -> None:
    run = held_mail(pipeline)
    Run.objects.filter(pk=run.pk).update(queued_at=timezone.now() - timedelta(hours=3, minutes=5))
    queue_claim(run_id=run.pk, user=lee)

    (row,) = queue_rows(client_for(lee), Outcome.RETRY_EXHAUSTED)
    cells = row.cells

    assert cells[RUN].primary == "Refund for order 5512"
    assert cells[RUN].text.endswith(f"#{run.pk} · refund-5512@example.org")
    assert cells[FROM].text == "Dana Ortiz"
    assert cells[AMOUNT].text == "—"
    assert cells[HELD].text == "3 hours, 5 minutes"
    assert cells[SLA].text == "Due in 20 hours"
    assert cells[OWNER].text == "lee"


def test_an_amount_a_route_and_an_overdue_sla_read_in_words(
    pipeline: Pipeline, lee: User, confidence_threshold: None
) -> None:
    run = unsure(pipeline)
    Run.objects.filter(pk=run.pk).update(queued_at=timezone.now() - timedelta(days=3))

    (row,) = queue_rows(client_for(lee), Outcome.LOW_CONFIDENCE)

    assert row.cells[AMOUNT].text == "1,250.00 EUR"
    assert row.cells[ROUTE].text == "Finance"
    assert row.cells[SLA].text == "Overdue by 2 days"
    assert row.cells[WHY].text == "Confidence 0.50 must reach 0.80 for “Billing”."


def test_the_why_of_a_field_problem_is_a_sentence_not_the_stored_json(
    pipeline: Pipeline, lee: User
) -> None:
    """Reported: the Why column showed `fields.amount: [{"field": …`, cut mid-word."""
    event = make_event(event_id="evt-amt")
    reading = decision_for(event)
    reading["value"]["fields"] = {"amount": {"value": "1.250.00 EUR", "confidence": 0.8}}
    pipeline.submit(event, [reading])

    (row,) = queue_rows(client_for(lee), Outcome.EXTRACTION_INVALID)

    assert row.cells[WHY].text == "Amount: '1.250.00 EUR' has two decimal separators."


def test_the_why_of_an_unusable_reading_names_the_field_not_the_allowed_codes(
    pipeline: Pipeline, lee: User
) -> None:
    event = make_event(event_id="evt-bad")
    pipeline.submit(event, [decision_for(event, requested_effect="delete_record")])

    (row,) = queue_rows(client_for(lee), Outcome.CLASSIFICATION_INVALID)

    assert row.cells[WHY].text == "Requested effect: is not one of the allowed values."


def test_a_long_reason_is_cut_at_a_word_with_the_whole_on_hover(
    pipeline: Pipeline, lee: User
) -> None:
    run = exhausted(pipeline, 1)
    words = " ".join(f"word{n}" for n in range(40))
    Run.objects.filter(pk=run.pk).update(failure_detail=words)

    page = client_for(lee).get(reverse("queues:queue", args=[Outcome.RETRY_EXHAUSTED]))
    (row,) = rows(page.content.decode(), "queue-row-")

    assert row.cells[WHY].text == "Classifier: " + " ".join(words.split()[:23]) + "…"
    assert f'title="Classifier: {words}."' in page.content.decode()


def test_no_cell_of_a_queue_shows_a_code_as_its_words(
    pipeline: Pipeline, lee: User, confidence_threshold: None
) -> None:
    unsure(pipeline)
    page = client_for(lee).get(reverse("queues:queue", args=[Outcome.LOW_CONFIDENCE]))
    html = page.content.decode()

    (row,) = rows(html, "queue-row-")
    assert "low_confidence" not in row.text and "send_internal_notification" not in row.text
    assert re.search(r"<h1><span [^>]*>Unsure reading</span> <small class=\"code\">", html)
    overview = client_for(lee).get(reverse("queues:list")).content.decode()
    assert re.search(
        r'>Unsure reading</span> <small class="code">low_confidence</small></a>', overview
    )


# --- order and pages -------------------------------------------------------------------------


def pages(filters: QueueFilters) -> list[list[str]]:
    """Every page of retry_exhausted, following each page's next cursor."""
    found = []
    while True:
        page = queue_items(queue="retry_exhausted", filters=filters, now=timezone.now())
        found.append([run.event_id for run in page.items])
        if page.next is None:
            return found
        filters = QueueFilters(order=filters.order, after=page.next)


def test_a_queue_pages_oldest_or_newest_first_and_back(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("automation.recovery.selectors.QUEUE_PAGE_SIZE", 2)
    for number in range(5):
        exhausted(pipeline, number)

    oldest = pages(QueueFilters())
    newest = pages(QueueFilters(order=NEWEST))
    last = queue_items(
        queue="retry_exhausted", filters=QueueFilters(order=NEWEST), now=timezone.now()
    )
    second = queue_items(
        queue="retry_exhausted",
        filters=QueueFilters(order=NEWEST, after=last.next),
        now=timezone.now(),
    )
    back = queue_items(
        queue="retry_exhausted",
        filters=QueueFilters(order=NEWEST, before=second.previous),
        now=timezone.now(),
    )

    assert oldest == [["evt-held-0", "evt-held-1"], ["evt-held-2", "evt-held-3"], ["evt-held-4"]]
    assert newest == [["evt-held-4", "evt-held-3"], ["evt-held-2", "evt-held-1"], ["evt-held-0"]]
    assert [run.event_id for run in back.items] == ["evt-held-4", "evt-held-3"]
    assert back.previous is None


def test_newest_first_reads_the_held_runs_index_backwards(pipeline: Pipeline) -> None:
    template = exhausted(pipeline, 1)
    clone_runs(template, 3000, queue="''", queued_at="NULL")
    clone_runs(template, 30, queued_at="now() - g * interval '1 minute'")
    filters = QueueFilters(order=NEWEST)

    with CaptureQueriesContext(connection) as captured:
        page = queue_items(queue="retry_exhausted", filters=filters, now=timezone.now())
    found = plan(captured.captured_queries[0]["sql"])

    assert page.items[0].event_id == "evt-held-1"  # held last, shown first
    assert "run_held_queue_idx" in found and "Backward" in found
    assert not [n for n in nodes(json.loads(found)) if n["Node Type"] in ("Seq Scan", "Sort")]


def nodes(explained: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan's nodes that read automation_run, or sort: a plan walked as a list."""
    found, waiting = [], [explained[0]["Plan"]]
    while waiting:
        node = waiting.pop()
        waiting.extend(node.get("Plans", []))
        if node.get("Relation Name") in (None, "automation_run"):
            found.append(node)
    return found


def test_the_queue_page_shows_newest_first_when_its_header_is_followed(
    pipeline: Pipeline, lee: User
) -> None:
    for number in range(3):
        exhausted(pipeline, number)
    client = client_for(lee)
    page = client.get(reverse("queues:queue", args=["retry_exhausted"]), {"owner": "none"})
    link = re.search(r'<a href="([^"]*)" data-testid="sort-held"', page.content.decode())
    assert link is not None and link.group(1) == "?owner=none&amp;order=newest"

    newest = queue_rows(client, "retry_exhausted", link.group(1).replace("&amp;", "&"))

    assert [re.findall(r"evt-held-\d", r.cells[RUN].text)[0] for r in newest] == [
        "evt-held-2",
        "evt-held-1",
        "evt-held-0",
    ]


def test_the_sort_header_keeps_the_filters_and_drops_the_page_position(
    pipeline: Pipeline, lee: User
) -> None:
    exhausted(pipeline, 1)
    page = client_for(lee).get(
        reverse("queues:queue", args=["retry_exhausted"]),
        {"owner": "none", "q": "", "after": "1.1"},
    )
    link = re.search(r'<a href="([^"]*)" data-testid="sort-held"', page.content.decode())

    assert link is not None and link.group(1) == "?owner=none&amp;q=&amp;order=newest"


# --- claiming many ---------------------------------------------------------------------------


def test_claiming_many_takes_the_free_and_mine_and_leaves_the_rest(
    pipeline: Pipeline, lee: User
) -> None:
    free, mine, taken, gone = (exhausted(pipeline, n) for n in range(4))
    ana = person("ana", "recovery-staff")
    queue_claim(run_id=mine.pk, user=lee)
    queue_claim(run_id=taken.pk, user=ana)
    Run.objects.filter(pk=gone.pk).update(queue="")
    before = RecoveryAction.objects.count()

    result = queue_claim_many(
        run_ids=[gone.pk, taken.pk, free.pk, mine.pk, free.pk, 10**12], user=lee
    )

    assert result.claimed == [free.pk, mine.pk]
    assert result.taken == {taken.pk: "ana"}
    assert result.not_queued == [gone.pk, 10**12]
    owners = dict(Run.objects.values_list("pk", "owner__username"))
    assert owners == {free.pk: "lee", mine.pk: "lee", taken.pk: "ana", gone.pk: None}
    claims = RecoveryAction.objects.order_by("pk")[before:]
    assert [(a.run_id, a.action, a.actor_id) for a in claims] == [
        (free.pk, "claim", lee.pk),
        (mine.pk, "claim", lee.pk),
    ]
    assert claims[0].data == {"owner": "lee", "previous_owner": None}
    assert claims[1].data == {"owner": "lee", "previous_owner": "lee"}


def test_claiming_many_needs_the_queue_permission_and_has_a_cap(
    pipeline: Pipeline, lee: User
) -> None:
    run = exhausted(pipeline, 1)
    with pytest.raises(PermissionDenied):
        queue_claim_many(run_ids=[run.pk], user=person("aud", "auditors"))
    with pytest.raises(ServiceError, match=f"at most {CLAIM_MANY_LIMIT} runs"):
        queue_claim_many(run_ids=list(range(1, CLAIM_MANY_LIMIT + 2)), user=lee)
    assert Run.objects.get(pk=run.pk).owner is None
    assert not RecoveryAction.objects.exists()


def claim(client: Client, run_ids: list[Any], **form: str) -> list[str]:
    url = reverse("queues:claim_many", args=["retry_exhausted"])
    response = client.post(url, {"run": run_ids, **form}, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


def test_the_claim_selected_button_says_what_happened_in_plain_words(
    pipeline: Pipeline, lee: User
) -> None:
    runs = [exhausted(pipeline, n) for n in range(5)]
    ana = person("ana", "recovery-staff")
    queue_claim(run_id=runs[4].pk, user=ana)
    client = client_for(lee)

    said = claim(client, [r.pk for r in runs])
    again = claim(client, [runs[4].pk])
    nothing = claim(client, [])
    junk = claim(client, ["x", "9" * 40, "\u0661"])

    assert said == ["Claimed 4 runs; 1 was already taken by ana."]
    assert again == ["Claimed no runs; 1 was already taken by ana."]
    assert nothing == junk == ["Nothing claimed: tick the runs to claim first."]
    assert set(Run.objects.filter(owner=lee).values_list("pk", flat=True)) == {
        r.pk for r in runs[:4]
    }


def test_claim_selected_returns_to_the_page_it_was_on_and_refuses_too_many(
    pipeline: Pipeline, lee: User
) -> None:
    run = exhausted(pipeline, 1)
    client = client_for(lee)
    url = reverse("queues:claim_many", args=["retry_exhausted"])
    back = reverse("queues:queue", args=["retry_exhausted"]) + "?owner=none"

    too_many = claim(client, list(range(1, CLAIM_MANY_LIMIT + 2)))
    response = client.post(url, {"run": [run.pk], "next": back})
    elsewhere = client.post(url, {"run": [run.pk], "next": "https://example.com/"})

    assert response.status_code == 302 and response["Location"] == back
    assert elsewhere["Location"] == reverse("queues:queue", args=["retry_exhausted"])
    assert too_many == [
        f"Nothing was claimed: claim at most {CLAIM_MANY_LIMIT} runs at once "
        f"({CLAIM_MANY_LIMIT + 1} were chosen)."
    ]


def test_claim_selected_is_for_those_who_work_the_queues_and_only_by_post(
    pipeline: Pipeline,
) -> None:
    run = exhausted(pipeline, 1)
    url = reverse("queues:claim_many", args=["retry_exhausted"])
    auditor = client_for(person("aud", "auditors"))

    assert auditor.post(url, {"run": [run.pk]}).status_code == 403
    assert client_for(person("lee", "ops-leads")).get(url).status_code == 405
    assert Client().post(url, {"run": [run.pk]}).status_code == 302  # to the login page
    assert Run.objects.get(pk=run.pk).owner is None
    page = auditor.get(reverse("queues:queue", args=["retry_exhausted"])).content.decode()
    assert "Claim selected" not in page and 'type="checkbox"' not in page


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released together; each result or raised exception."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def work(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:  # reported by the test, in its thread
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.django_db(transaction=True)
def test_two_people_claiming_overlapping_runs_at_once_never_share_one(
    pipeline: Pipeline,
) -> None:
    runs = [exhausted(pipeline, n).pk for n in range(12)]
    a, b = person("a", "ops-leads"), person("b", "recovery-staff")

    for _ in range(3):  # several rounds: each may interleave differently
        Run.objects.filter(pk__in=runs).update(owner=None)
        rewrite(RecoveryAction).delete()
        first, second = at_once(
            lambda: queue_claim_many(run_ids=runs[:8], user=a),
            lambda: queue_claim_many(run_ids=runs[4:][::-1], user=b),
        )

        assert not isinstance(first, Exception) and not isinstance(second, Exception)
        assert set(first.claimed) | set(second.claimed) == set(runs)
        assert not set(first.claimed) & set(second.claimed)
        assert set(first.taken) | set(second.taken) == set(runs[4:8])
        owners = dict(Run.objects.filter(pk__in=runs).values_list("pk", "owner__username"))
        actions = list(RecoveryAction.objects.values_list("run_id", "actor__username"))
        assert sorted(actions) == sorted(owners.items())  # one claim each, by its owner


# --- queries ---------------------------------------------------------------------------------


def count_queries(client: Client, url: str) -> int:
    client.get(url)  # sessions and permission caches warm, as in use
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_a_queue_page_makes_as_many_queries_for_many_rows_as_for_few(
    pipeline: Pipeline, lee: User
) -> None:
    url = reverse("queues:queue", args=["retry_exhausted"])
    queue_claim(run_id=exhausted(pipeline, 0).pk, user=lee)
    client = client_for(lee)
    few = count_queries(client, url)
    for number in range(1, 7):
        run = exhausted(pipeline, number)
        if number % 2:
            queue_claim(run_id=run.pk, user=person(f"p{number}", "recovery-staff"))

    assert count_queries(client, url) == few
    assert count_queries(client, url + "?order=newest") == few
    assert len(queue_rows(client, "retry_exhausted")) == 7


def test_each_rows_buttons_act_on_that_row_through_the_pages_one_form(
    pipeline: Pipeline, lee: User
) -> None:
    first, second = exhausted(pipeline, 1), exhausted(pipeline, 2)
    ana = person("ana", "recovery-staff")
    client = client_for(lee)
    page = client.get(reverse("queues:queue", args=["retry_exhausted"])).content.decode()

    actions = set(re.findall(r'form="row-action" formaction="([^"]+)"', page))
    for run in (first, second):
        for action in ("claim", "assign"):
            assert reverse("runs:queue_action", args=[run.pk, action]) in actions
    assert page.count('<option value="ana">ana</option>') == 2  # one list per row
    # The browser sends every row's choice with the one form; the row's button names the run.
    response = client.post(
        reverse("runs:queue_action", args=[second.pk, "assign"]),
        {f"assignee-{first.pk}": "lee", f"assignee-{second.pk}": "ana", "next": "/"},
    )
    assert response.status_code == 302
    second.refresh_from_db()
    first.refresh_from_db()
    assert second.owner == ana and first.owner is None
