"""Every kind of notification speaks the console's words: its subject and text are rendered
from its templates, and none carries a code (an outcome such as `effect_unavailable`, an
effect such as `queue_account_review`, a role group's name) where people read words."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import ApprovalRequest, Delegation
from automation.models import RunComment, Task, TaskComment
from core.codes import Outcome
from core.mail import render
from notifications.models import Kind, Notification
from notifications.services import Event, digest_context, notification_text
from policy.catalogue import reference_catalogue
from policy.words import GROUPS
from tests.conftest import Pipeline
from tests.notifications.test_notifications import waiting_request

REQUEST_KINDS = (Kind.WAITING, Kind.ASSIGNED, Kind.SLA_NEAR, Kind.ESCALATED, Kind.EXPIRING)
HELD_EFFECT = "create_follow_up"
HELD_CATEGORY = "billing"
WRITER = "O'Brien & Co"  # plain text: never &#x27; or &amp;


def codes() -> set[str]:
    """The codes no message may show: every outcome, every name of the reference catalogue
    written as a code (with an underscore), every role group's name."""
    catalogue = reference_catalogue()
    names = {*catalogue.effects, *catalogue.request_types, *catalogue.routes}
    return {*Outcome.values, *(n for n in names if "_" in n), *GROUPS}


def leaked(text: str) -> set[str]:
    return {code for code in codes() if code in text}


def texts(request: ApprovalRequest) -> dict[str, tuple[str, str]]:
    """The subject and text of each kind, for a person and for a group's chat."""
    run = {"pk": request.run_id, "event_id": "evt-words"}
    writer = User(pk=901, username=WRITER)
    found: dict[str, tuple[str, str]] = {}
    for kind in REQUEST_KINDS:
        event = Event(kind, f"{kind}:x", request.run_id, request, (request.group,))
        found[kind] = notification_text(event, request.group, run)
        found[f"{kind} chat"] = notification_text(event, request.group, run, personal=False)
    held = {**run, "outcome": Outcome.EFFECT_UNAVAILABLE, "queue": Outcome.EFFECT_UNAVAILABLE}
    held |= {"category": HELD_CATEGORY, "effect_name": HELD_EFFECT}
    found["held"] = notification_text(Event(Kind.HELD, "held:x", request.run_id, None), "", held)
    comment = RunComment(pk=7, run_id=request.run_id, author=writer, body="Look at\nthis")
    event = Event(Kind.MENTIONED, "m:x", request.run_id, None, groups=(request.group,))
    found["mentioned"] = notification_text(
        Event(**{**event.__dict__, "comment": comment}), request.group, run
    )
    task = Task(pk=11, run_id=request.run_id, effect=HELD_EFFECT, subject="")
    noted = TaskComment(pk=8, task=task, author=writer, body="Please")
    found["task mentioned"] = notification_text(
        Event(Kind.MENTIONED, "t:x", request.run_id, None, task_comment=noted), "", run
    )
    now = timezone.now()
    away = Delegation(
        pk=3, delegator=writer, starts_at=now, ends_at=now + timedelta(days=3), reason="leave"
    )
    found["delegated"] = notification_text(
        Event(Kind.DELEGATED, "d:x", None, None, delegation=away), "", None
    )
    return found


def test_every_kind_is_told_in_words_and_never_in_codes(pipeline: Pipeline) -> None:
    request = waiting_request(pipeline)
    assert "_" in request.effect and request.group in GROUPS  # codes that must not be shown
    found = texts(request)

    for name, (subject, body) in found.items():
        assert subject and body, name
        assert not leaked(subject + "\n" + body), (name, leaked(subject + "\n" + body))
    subject, body = found[Kind.WAITING]
    wanted = "A request waits for Security approvers: Queue an account review for run"
    assert subject == f"{wanted} {request.run_id}"
    assert "Of: Security approvers (you are a member)." in body
    assert "you are a member" not in found[f"{Kind.WAITING} chat"][1]
    subject, body = found["held"]
    assert "Delivery failed" in subject and "could not be reached" in body
    assert "Request: Billing; effect “Create a follow-up”." in body
    assert "Queue: Delivery failed." in body
    assert f"{WRITER} mentions the Security approvers group" in found["mentioned"][1]
    assert "> Look at\n> this\n" in found["mentioned"][1]
    assert "task 11 (Create a follow-up)" in found["task mentioned"][1]
    assert f"{WRITER} lets you decide" in found["delegated"][1]


def test_the_digest_is_told_in_words(pipeline: Pipeline) -> None:
    request = waiting_request(pipeline)
    subject, body = texts(request)[Kind.WAITING]
    rows = [Notification(subject=subject, body=body) for _ in range(3)]
    digest = render("notifications/digest", digest_context(rows))
    assert digest.subject == "Your Gatehouse digest: 3 things"
    assert digest.body.count("Of: Security approvers") == 3 and not leaked(digest.body)


@pytest.mark.parametrize("text", ["is held (effect_unavailable)", "Of: finance-approvers."])
def test_a_planted_code_is_caught(text: str) -> None:
    """The check above can fail: a text that shows a code is found out."""
    assert leaked(text)
