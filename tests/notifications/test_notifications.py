"""Telling people of work: an e-mail per event and person through a real SMTP server on
127.0.0.1, never twice (two finders and senders racing on PostgreSQL), retried when the
server refuses, held for a digest or not sent at all as the person chose, and shown on the
run page."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from approvals.services import approval_escalate
from automation.models import Run
from automation.runs.comments import run_comment_add
from notifications.models import Kind, Mode, Notification, Preference, Status
from notifications.services import notifications_digest, notifications_find, notifications_send
from notifications.tasks import notify
from tests.conftest import Pipeline, decision_for, make_event
from tests.mailserver import Inbox, mail_through


@pytest.fixture
def outbox(settings: Any) -> Iterator[Inbox]:
    with mail_through(settings) as server:
        yield server


def member(username: str, *groups: str, email: str = "") -> User:
    user = User.objects.create_user(
        username=username, email=email or f"{username}@shop.example", password="pw-" + username
    )
    user.groups.add(*[Group.objects.get_or_create(name=name)[0] for name in groups])
    return user


def waiting_request(pipeline: Pipeline, event_id: str = "evt-told") -> ApprovalRequest:
    roles_ensure()
    event = make_event(
        event_id=event_id, request_type="security", requested_action="queue_account_review"
    )
    pipeline.submit(event, [decision_for(event, reason_code="security_sensitive")])
    return ApprovalRequest.objects.get(run__event_id=event_id)


def sent_to(outbox: Inbox) -> Counter[str]:
    return Counter(address for r in outbox.received for address in r.recipients)


def test_each_member_of_the_group_is_told_once_with_a_link_to_the_evidence(
    pipeline: Pipeline, outbox: Inbox
) -> None:
    request = waiting_request(pipeline)
    alice = member("alice", request.group)
    member("bob", request.group)
    member("carol", "finance-approvers")  # another group: not told
    member("dave", request.group).groups.add(Group.objects.get_or_create(name="ops-leads")[0])
    User.objects.filter(username="dave").update(is_active=False)  # left the company

    notify()
    notify()  # a second pass finds nothing new

    assert sent_to(outbox) == Counter({"alice@shop.example": 1, "bob@shop.example": 1})
    message = next(r.message for r in outbox.received if r.recipients == [alice.email])
    text = message.get_content()
    link = f"https://gatehouse.example.com/approvals/{request.pk}/"
    assert link in text
    assert "Of: Security approvers (you are a member)." in text
    assert "approve or reject “Queue an account review”" in text
    assert "By: before" in text and "expires at" in text
    assert message["Subject"].startswith("A request waits for Security approvers: Queue an")
    # It asks; it never decides: no link in it decides anything.
    assert "/decide" not in text
    assert message["Auto-Submitted"] == "auto-generated"
    rows = Notification.objects.filter(approval=request)
    assert set(rows.values_list("status", flat=True)) == {Status.SENT}


@pytest.mark.django_db(transaction=True)
def test_escalation_and_near_expiry_tell_each_person_once_with_two_workers_racing(
    pipeline: Pipeline, outbox: Inbox
) -> None:
    racing = pipeline
    request = waiting_request(racing, "evt-race")
    for name in ("erin", "frank", "grace"):
        member(name, request.group)
    escalated_to = request.escalate_to or "ops-leads"
    member("heidi", escalated_to)
    for person in ("ivan", "judy"):
        member(person, escalated_to, request.group)  # in both: told once of each event
    ApprovalRequest.objects.filter(pk=request.pk).update(escalate_to=escalated_to)
    assert approval_escalate(request_id=request.pk, now=request.escalate_at)
    # Inside the last quarter of the time before it expires.
    request.refresh_from_db()
    late = request.expires_at - (request.expires_at - request.created_at) * 0.1

    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait(timeout=10)
            notifications_find(now=late)
            notifications_send(now=late)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []

    rows = Notification.objects.filter(approval=request)
    per_person = Counter(rows.values_list("kind", "user__username"))
    assert all(count == 1 for count in per_person.values())
    escalated = {u for k, u in per_person if k == Kind.ESCALATED}
    expiring = {u for k, u in per_person if k == Kind.EXPIRING}
    assert escalated == {"heidi", "ivan", "judy"}
    assert expiring == {"erin", "frank", "grace", "heidi", "ivan", "judy"}
    # Each row was sent once: one message per person and kind, whoever sent it.
    subjects = Counter(
        (r.recipients[0], r.message["Subject"].split(":")[0]) for r in outbox.received
    )
    assert all(count == 1 for count in subjects.values())
    assert len(outbox.received) == rows.count()
    assert set(rows.values_list("status", flat=True)) == {Status.SENT}


def test_a_refused_message_is_sent_again_later_and_the_run_page_shows_who_was_told(
    pipeline: Pipeline, outbox: Inbox, ops_lead: User
) -> None:
    request = waiting_request(pipeline)
    member("alice", request.group)
    outbox.answers.append("451 try again later")
    now = timezone.now()

    notifications_find(now=now)
    assert notifications_send(now=now) == {"sent": 0, "failed": 0, "retry": 1}
    row = Notification.objects.get()
    assert (row.status, row.attempts) == (Status.PENDING, 1)
    assert "451" in row.last_error and row.next_attempt_at > now
    assert notifications_send(now=now) == {"sent": 0, "failed": 0, "retry": 0}  # not yet due

    assert notifications_send(now=row.next_attempt_at)["sent"] == 1
    assert sent_to(outbox) == Counter({"alice@shop.example": 1})

    roles_ensure()
    ops_lead.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(ops_lead)
    page = client.get(reverse("runs:run", args=[request.run_id])).content.decode()
    row.refresh_from_db()
    assert f"told alice ({request.group}) at {timezone.localtime(row.sent_at):%H:%M}" in page


def test_off_is_never_sent_and_a_digest_comes_as_one_message(
    pipeline: Pipeline, outbox: Inbox
) -> None:
    first = waiting_request(pipeline, "evt-one")
    second = waiting_request(pipeline, "evt-two")
    quiet = member("quiet", first.group)
    daily = member("daily", first.group)
    member("eager", first.group)
    Preference.objects.create(user=quiet, kind=Kind.WAITING, mode=Mode.OFF)
    Preference.objects.create(user=daily, kind=Kind.WAITING, mode=Mode.DIGEST)

    notify()

    assert sent_to(outbox) == Counter({"eager@shop.example": 2})
    assert set(Notification.objects.filter(user=quiet).values_list("status", flat=True)) == {
        Status.OFF
    }
    assert notifications_digest(now=timezone.now()) == 1
    assert notifications_digest(now=timezone.now()) == 0  # nothing new since
    (digest,) = [r for r in outbox.received if r.recipients == [daily.email]]
    text = digest.message.get_content()
    assert digest.message["Subject"] == "Your Gatehouse digest: 2 things"
    assert f"run {first.run_id}" in text and f"run {second.run_id}" in text
    assert set(Notification.objects.filter(user=daily).values_list("status", flat=True)) == {
        Status.DIGESTED
    }


def test_the_owner_of_a_run_is_told_each_time_it_is_held(pipeline: Pipeline, outbox: Inbox) -> None:
    event = make_event(event_id="evt-held")
    owner = member("owner", "ops-leads")
    pipeline.submit(event, [{"type": "timeout"}] * 3)
    run = Run.objects.get(event_id="evt-held")
    assert run.state == "needs_review"
    Run.objects.filter(pk=run.pk).update(owner=owner)

    notify()
    notify()

    assert sent_to(outbox) == Counter({"owner@shop.example": 1})
    (told,) = Notification.objects.filter(kind=Kind.HELD)
    assert told.user == owner and f"Run {run.pk}, which you work on, is held" in told.body
    assert "Classifier unavailable" in told.body and "retry_exhausted" not in told.body


def test_a_person_chooses_how_they_hear_of_each_kind(db: None) -> None:
    person = member("person")
    client = Client()
    client.force_login(person)
    url = reverse("me:notifications")
    page = client.get(url).content.decode()
    assert "person@shop.example" in page and page.count('type="radio"') == 3 * len(Kind)

    chosen = {kind: Mode.IMMEDIATE.value for kind in Kind.values} | {"held": "digest"}
    answer = client.post(url, chosen)
    assert answer.status_code == 302
    assert dict(Preference.objects.filter(user=person).values_list("kind", "mode"))["held"] == (
        "digest"
    )
    refused = client.post(url, {**chosen, "held": "sometimes"}, follow=True)
    assert "Choose at once" in refused.content.decode()
    assert Preference.objects.get(user=person, kind="held").mode == "digest"  # unchanged

    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]


def test_someone_without_an_address_is_named_not_retried(pipeline: Pipeline, outbox: Inbox) -> None:
    request = waiting_request(pipeline)
    member("noaddress", request.group, email=" ")
    User.objects.filter(username="noaddress").update(email="")
    now = timezone.now() + timedelta(seconds=1)
    notifications_find(now=now)
    assert notifications_send(now=now) == {"sent": 0, "failed": 1, "retry": 0}
    assert Notification.objects.get().last_error == "the person has no e-mail address"
    assert outbox.received == []


class ChatReceiver(BaseHTTPRequestHandler):
    """An incoming webhook on 127.0.0.1: keeps what is posted; answers 500 while `failing`."""

    posted: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    failing: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.failing:
            self.failing.pop()
            self.send_response(500)
        else:
            self.posted.append((self.path, body))
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chat() -> Iterator[str]:
    ChatReceiver.posted.clear()
    ChatReceiver.failing.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatReceiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_group_chat_is_told_in_slack_and_teams_shapes_and_retried(
    pipeline: Pipeline, outbox: Inbox, chat: str, settings: Any, ops_lead: User
) -> None:
    request = waiting_request(pipeline)
    settings.GATEHOUSE = {
        **settings.GATEHOUSE,
        "NOTIFY_WEBHOOKS": {request.group: f"slack:{chat}/slack", "unused": "teams:{chat}/x"},
    }
    ChatReceiver.failing.append(1)  # the first post fails
    now = timezone.now()

    notifications_find(now=now)
    notifications_find(now=now)
    assert notifications_send(now=now)["retry"] == 1
    row = Notification.objects.get(channel="slack")
    assert (row.status, row.user, row.group) == (Status.PENDING, None, request.group)
    assert notifications_send(now=row.next_attempt_at)["sent"] == 1

    ((path, body),) = ChatReceiver.posted
    assert path == "/slack" and body["text"].startswith("*A request waits for Security approvers")
    assert f"/approvals/{request.pk}/" in body["text"]
    assert "you are a member" not in body["text"] and "choose how you hear" not in body["text"]

    settings.GATEHOUSE = {
        **settings.GATEHOUSE,
        "NOTIFY_WEBHOOKS": {request.group: f"teams:{chat}/teams"},
    }
    escalate_to = "ops-leads"
    ApprovalRequest.objects.filter(pk=request.pk).update(escalate_to=escalate_to)
    settings.GATEHOUSE["NOTIFY_WEBHOOKS"][escalate_to] = f"teams:{chat}/teams"
    assert approval_escalate(request_id=request.pk, now=request.escalate_at)
    notifications_find(now=request.escalate_at)
    notifications_send(now=request.escalate_at)
    (path, card) = ChatReceiver.posted[-1]
    assert path == "/teams" and card["@type"] == "MessageCard"
    assert card["title"].startswith("A request was escalated to Ops leads")

    roles_ensure()
    ops_lead.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(ops_lead)
    page = client.get(reverse("runs:run", args=[request.run_id])).content.decode()
    assert f"told the {request.group} chat (Slack) at" in page
    assert "told the ops-leads chat (Microsoft Teams) at" in page


def test_a_mention_tells_the_person_and_the_group_once_but_not_the_writer(
    pipeline: Pipeline, outbox: Inbox
) -> None:
    request = waiting_request(pipeline)
    roles_ensure()
    writer = member("writer", request.group, "ops-leads")
    lead = member("lead", "ops-leads")
    named = member("named", "ops-leads")  # named and in the group: told once
    Notification.objects.all().delete()
    comment = run_comment_add(
        run_id=request.run_id,
        author=writer,
        body="@named could you check the account?\n@ops-leads FYI, and @nobody here.",
        now=timezone.now(),
    )
    outbox.received.clear()
    now = timezone.now()
    notifications_find(now=now)
    notifications_send(now=now)
    notifications_find(now=now)
    notifications_send(now=now)

    mentioned = Notification.objects.filter(kind=Kind.MENTIONED)
    assert sorted(mentioned.values_list("user__username", "group")) == [
        ("lead", "ops-leads"),
        ("named", ""),
    ]
    assert Counter(
        r.recipients[0] for r in outbox.received if "mentions" in r.message["Subject"]
    ) == Counter({named.email: 1, lead.email: 1})
    text = next(r for r in outbox.received if r.recipients == [named.email]).message.get_content()
    assert "writer mentions you in a comment on run" in text
    assert "> @named could you check the account?" in text
    assert f"/runs/{request.run_id}/#comment-{comment.pk}" in text


def test_a_digest_of_thousands_lists_the_first_and_says_how_many_more_and_where(
    db: None, outbox: Inbox
) -> None:
    daily = member("daily")
    now = timezone.now()
    body = "A request waits.\n\nAsked: approve it.\nOf: you.\n" + "By: tomorrow. " * 100
    Notification.objects.bulk_create(
        Notification(
            key=f"waiting:{n}:{daily.pk}",
            kind=Kind.WAITING,
            user=daily,
            subject=f"A request waits for you: thing {n}",
            body=body,
            status=Status.DIGEST,
            created_at=now - timedelta(seconds=5000 - n),
        )
        for n in range(5000)
    )

    assert notifications_digest(now=now) == 1

    (digest,) = outbox.received
    text = digest.message.get_content().replace("\r\n", "\n")
    assert digest.message["Subject"] == "Your Gatehouse digest: 5000 things"
    assert len(text) < 40_000  # 5,000 things listed in full made about 4 MB
    assert "thing 0\n" in text and "thing 49\n" in text and "thing 50\n" not in text
    assert "and 4,950 more: your work in the console lists them, http" in text
    assert reverse("me:work") in text
    assert set(Notification.objects.filter(user=daily).values_list("status", flat=True)) == {
        Status.DIGESTED
    }


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("broken@@shop.example\nBcc: everyone@shop.example", id="line-break"),
        pytest.param("a@b@shop.example", id="two-at-signs"),
        pytest.param("dana@shop example", id="space-in-domain"),
    ],
)
def test_one_malformed_address_is_that_rows_failure_and_the_rest_are_sent(
    pipeline: Pipeline, outbox: Inbox, address: str
) -> None:
    request = waiting_request(pipeline)
    broken = member("broken", request.group)  # first: its row is the first in the queue
    User.objects.filter(pk=broken.pk).update(email=address)
    member("alice", request.group)
    member("bob", request.group)
    now = timezone.now() + timedelta(seconds=1)
    notifications_find(now=now)

    assert notifications_send(now=now) == {"sent": 2, "failed": 0, "retry": 1}

    assert sent_to(outbox) == Counter({"alice@shop.example": 1, "bob@shop.example": 1})
    row = Notification.objects.get(user=broken)
    assert (row.status, row.attempts) == (Status.PENDING, 1)
    assert "Invalid address" in row.last_error and row.next_attempt_at > now
    assert "\n" not in row.last_error
    # Retried with backoff, and given up after the last attempt: never the queue's failure.
    for _ in range(10):
        row.refresh_from_db()
        if row.status != Status.PENDING:
            break
        notifications_send(now=row.next_attempt_at)
    row.refresh_from_db()
    assert (row.status, row.attempts) == (Status.FAILED, 6)
    assert len(outbox.received) == 2


def test_a_writer_whose_username_has_a_line_break_stops_nobodys_mail(
    pipeline: Pipeline, outbox: Inbox
) -> None:
    request = waiting_request(pipeline)
    roles_ensure()
    writer = member("ev\nil", request.group, "ops-leads")
    named = member("named", "ops-leads")
    Notification.objects.all().delete()
    run_comment_add(
        run_id=request.run_id, author=writer, body="@named please look", now=timezone.now()
    )
    member("alice", request.group)  # and a request told after the mention
    later = waiting_request(pipeline, "evt-later")
    now = timezone.now() + timedelta(seconds=1)

    notify()
    notifications_send(now=now)

    told = sent_to(outbox)
    assert told[named.email] == 1 and told["alice@shop.example"] >= 1
    subject = next(r for r in outbox.received if r.recipients == [named.email]).message["Subject"]
    assert "\n" not in subject and subject.startswith("ev il mentions you")
    assert Notification.objects.filter(approval=later, status=Status.SENT).exists()


def test_a_mention_tells_only_those_who_may_read_the_run(
    pipeline: Pipeline, outbox: Inbox, chat: str, settings: Any
) -> None:
    request = waiting_request(pipeline)  # routed to the security approvers
    roles_ensure()
    settings.GATEHOUSE = {
        **settings.GATEHOUSE,
        "NOTIFY_WEBHOOKS": {
            "finance-approvers": f"slack:{chat}/finance",
            request.group: f"slack:{chat}/security",
        },
    }
    writer = member("writer", "ops-leads")
    approver = member("approver", request.group)  # the run has a request for them: may read
    member("auditor", "auditors")  # reads every run
    outsider = member("outsider", "finance-approvers")  # no request of this run is theirs
    member("nobody")  # in no group at all
    Notification.objects.all().delete()
    run_comment_add(
        run_id=request.run_id,
        author=writer,
        body=f"@approver @auditor @outsider @nobody and @finance-approvers, @{request.group}",
        now=timezone.now(),
    )
    now = timezone.now()
    notifications_find(now=now)
    notifications_send(now=now)

    told = Notification.objects.filter(kind=Kind.MENTIONED)
    assert sorted(told.exclude(user=None).values_list("user__username", flat=True)) == [
        "approver",
        "auditor",
    ]
    mentioned = Counter(
        r.recipients[0] for r in outbox.received if "mentions" in r.message["Subject"]
    )
    assert mentioned == Counter({approver.email: 1, "auditor@shop.example": 1})
    assert outsider.email not in sent_to(outbox)
    # Only the chat of a group that may read the run is told of the comment.
    assert [path for path, _ in ChatReceiver.posted if "mentions" in _["text"]] == ["/security"]


def test_a_chat_webhook_that_is_no_url_is_that_rows_failure(
    pipeline: Pipeline, outbox: Inbox, settings: Any
) -> None:
    request = waiting_request(pipeline)
    settings.GATEHOUSE = {
        **settings.GATEHOUSE,
        "NOTIFY_WEBHOOKS": {request.group: "slack:http://[::1/broken"},  # httpx.InvalidURL
    }
    member("alice", request.group)
    now = timezone.now() + timedelta(seconds=1)
    notifications_find(now=now)

    assert notifications_send(now=now) == {"sent": 1, "failed": 0, "retry": 1}

    assert sent_to(outbox) == Counter({"alice@shop.example": 1})
    chat_row = Notification.objects.get(channel="slack")
    assert chat_row.status == Status.PENDING and "InvalidURL" in chat_row.last_error
