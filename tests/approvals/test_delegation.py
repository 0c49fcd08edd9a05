"""Out of office: a person lets someone decide their approvals for a window. Inside it the
delegate decides for them; after it (or once ended) they may not; separation of duties holds
through it, and one person counts once whoever decides for them."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals import selectors
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide, delegation_end, delegation_give
from audit.models import AuditAction, AuditEvent
from core.errors import ServiceError
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.approvals.test_bulk import waiting
from tests.conftest import Pipeline


def person(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(*[Group.objects.get_or_create(name=name)[0] for name in groups])
    return user


@pytest.fixture
def people(pipeline: Pipeline) -> dict[str, User]:
    roles_ensure()
    return {
        "ana": person("ana", "security-approvers"),  # away
        "fred": person("fred", "finance-approvers"),  # decides for her
        "bea": person("bea", "security-approvers"),
        "nobody": person("nobody"),
    }


def give(people: dict[str, User], hours: int = 8) -> None:
    now = timezone.now()
    delegation_give(
        delegator=people["ana"],
        delegate=people["fred"],
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=hours),
        reason="holiday",
        by=people["ana"],
    )


def decide(pipeline: Pipeline, request: ApprovalRequest, user: User) -> str:
    with pipeline.capture():
        result = approval_decide(
            request_id=request.pk, user=user, approve=True, seen=request.binding()
        )
    pipeline.drain()
    return result.code


def test_inside_the_window_the_delegate_decides_for_them_and_it_is_shown(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    request = waiting(pipeline, "evt-away")
    fred = people["fred"]
    assert request not in selectors.visible_requests(fred)
    give(people)
    assert AuditEvent.objects.filter(
        action=AuditAction.DELEGATION_GIVEN, actor=people["ana"]
    ).exists()
    assert request in selectors.visible_requests(fred)
    client = Client()
    client.force_login(fred)
    page = client.get(reverse("approvals:evidence", args=[request.pk])).content.decode()
    assert "ana is away until" in page and "<strong>fred</strong> decides for them" in page
    assert (
        f"#{request.pk}" in client.get(reverse("approvals:inbox") + "?scope=mine").content.decode()
    )

    assert decide(pipeline, request, fred) == ApprovalStatus.APPROVED
    decision = ApprovalDecision.objects.get(request=request)
    assert (decision.user, decision.on_behalf_of) == (fred, people["ana"])
    event = AuditEvent.objects.get(action=AuditAction.APPROVAL_APPROVE)
    assert event.data["on_behalf_of"] == people["ana"].pk
    page = client.get(reverse("approvals:evidence", args=[request.pk])).content.decode()
    assert "<strong>fred</strong> for ana" in page


def test_after_the_window_or_once_ended_the_delegate_may_not(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    request = waiting(pipeline, "evt-late")
    give(people, hours=1)
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        assert request not in selectors.visible_requests(people["fred"])
        with pytest.raises(ServiceError, match="not in the security-approvers group"):
            decide(pipeline, request, people["fred"])
    delegation_give(
        delegator=people["ana"],
        delegate=people["fred"],
        starts_at=timezone.now() - timedelta(minutes=1),
        ends_at=timezone.now() + timedelta(hours=1),
        reason="",
        by=people["ana"],
    )
    for delegation in people["ana"].delegations_given.all():
        delegation_end(delegation_id=delegation.pk, by=people["fred"], now=timezone.now())
    with pytest.raises(ServiceError, match="not in the security-approvers group"):
        decide(pipeline, request, people["fred"])
    assert not ApprovalDecision.objects.exists()


def test_separation_of_duties_holds_through_a_delegation(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    request = waiting(pipeline, "evt-sod")
    give(people)
    AuditEvent.objects.create(
        run_id=request.run_id, actor=people["fred"], actor_label="fred", action="run.correct"
    )
    with pytest.raises(ServiceError, match="someone else must decide"):
        decide(pipeline, request, people["fred"])
    other = waiting(pipeline, "evt-sod-2")
    AuditEvent.objects.create(
        run_id=other.run_id, actor=people["ana"], actor_label="ana", action="run.correct"
    )
    with pytest.raises(ServiceError, match="ana acted on this run, so nobody decides it for them"):
        decide(pipeline, other, people["fred"])
    assert not ApprovalDecision.objects.filter(counted=True).exists()


def test_one_person_counts_once_whoever_decides_for_them(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", "version: policy-two").replace(
        "    approvers: 1\n", "    approvers: 2\n"
    )
    policy_version_create(document=parse_policy_text(text))
    policy_version_activate(name="policy-two")
    request = waiting(pipeline, "evt-two")
    give(people)
    assert decide(pipeline, request, people["fred"]) == "recorded"  # for ana
    with pytest.raises(ServiceError, match="already decided"):
        decide(pipeline, request, people["ana"])  # back early: her decision is given
    assert decide(pipeline, request, people["bea"]) == ApprovalStatus.APPROVED
    request.refresh_from_db()
    assert request.status == ApprovalStatus.APPROVED


def test_only_someone_who_decides_approvals_can_be_delegated_to(
    people: dict[str, User],
) -> None:
    now = timezone.now()
    with pytest.raises(ServiceError, match="nobody may not decide approvals"):
        delegation_give(
            delegator=people["ana"],
            delegate=people["nobody"],
            starts_at=now,
            ends_at=now + timedelta(hours=1),
            reason="",
            by=people["ana"],
        )
    with pytest.raises(ServiceError, match="only the person or a lead"):
        delegation_give(
            delegator=people["ana"],
            delegate=people["fred"],
            starts_at=now,
            ends_at=now + timedelta(hours=1),
            reason="",
            by=people["bea"],
        )
    with pytest.raises(ServiceError, match="end must come after the start"):
        delegation_give(
            delegator=people["ana"],
            delegate=people["fred"],
            starts_at=now,
            ends_at=now,
            reason="",
            by=people["ana"],
        )


def test_the_delegate_is_told_once(pipeline: Pipeline, people: dict[str, User]) -> None:
    from notifications.models import Kind, Notification
    from notifications.services import notifications_find

    give(people)
    notifications_find(now=timezone.now())
    notifications_find(now=timezone.now())
    (told,) = Notification.objects.filter(kind=Kind.DELEGATED)
    assert told.user == people["fred"] and told.run is None
    assert told.subject.startswith("You decide for ana until")
    assert "ana lets you decide their approvals while they are away." in told.body


# Ends of the calendar a datetime-local field can be made to send. The first two, read in
# their own offset, are moments of year 10000 and year 0 in UTC, which PostgreSQL stores and
# psycopg cannot read back (every page and task that read the row failed); the others are no
# date a datetime holds.
OUT_OF_RANGE = "Enter a date between 1970-01-01 and 2999-12-31."
UNREADABLE = "Enter a valid date/time."
FAR_ENDS = [
    ("ends_at", "9999-12-31T23:59-14:00", OUT_OF_RANGE),
    ("starts_at", "0001-01-01T00:00+14:00", OUT_OF_RANGE),
    ("ends_at", "10000-01-01T00:00", UNREADABLE),
    ("starts_at", "0000-01-01T00:00", UNREADABLE),
]


@pytest.mark.parametrize(("field", "value", "shown"), FAR_ENDS, ids=[v for _, v, _ in FAR_ENDS])
def test_a_window_past_the_calendar_is_refused_and_breaks_nothing(
    pipeline: Pipeline, people: dict[str, User], field: str, value: str, shown: str
) -> None:
    from notifications.tasks import notify

    request = waiting(pipeline, "evt-far")
    ana, fred = Client(), Client()
    ana.force_login(people["ana"])
    fred.force_login(people["fred"])
    window = {"starts_at": "2026-12-01T09:00", "ends_at": "2026-12-02T09:00", field: value}

    answer = ana.post(
        reverse("me:delegation"), {"delegate": people["fred"].pk, "reason": "", **window}
    )

    assert answer.status_code == 200
    assert shown in answer.content.decode()
    assert not people["ana"].delegations_given.exists()
    for client in (ana, fred):
        assert client.get(reverse("me:delegation")).status_code == 200
    notify()
    decide(pipeline, request, people["bea"])
    assert ana.get(reverse("approvals:evidence", args=[request.pk])).status_code == 200


def test_the_service_refuses_a_window_past_the_calendar(people: dict[str, User]) -> None:
    from datetime import datetime
    from datetime import timezone as tz

    now = timezone.now()
    for starts_at, ends_at in [
        (now, datetime(9999, 12, 31, 23, 59, tzinfo=tz(timedelta(hours=-14)))),
        (datetime(1, 1, 1, tzinfo=tz(timedelta(hours=14))), now),
    ]:
        with pytest.raises(ServiceError, match="Enter a date between 1970-01-01 and 2999-12-31"):
            delegation_give(
                delegator=people["ana"],
                delegate=people["fred"],
                starts_at=starts_at,
                ends_at=ends_at,
                reason="",
                by=people["ana"],
            )
    assert not people["ana"].delegations_given.exists()


def test_a_window_typed_in_the_form_is_given(people: dict[str, User]) -> None:
    client = Client()
    client.force_login(people["ana"])
    window = {"starts_at": "2026-12-01T09:00", "ends_at": "2026-12-02T09:00+01:00"}

    answer = client.post(
        reverse("me:delegation"), {"delegate": people["fred"].pk, "reason": "away", **window}
    )

    assert answer.status_code == 302
    (given,) = people["ana"].delegations_given.all()
    assert (given.delegate, given.reason) == (people["fred"], "away")
    assert given.ends_at.isoformat() == "2026-12-02T08:00:00+00:00"
    refused = client.post(reverse("me:delegation"), {"delegate": "\u00b2", **window})
    assert "Choose a person." in refused.content.decode()
    assert client.post(reverse("me:delegation"), {"end": "\u00b2"}).status_code == 404


# What the unbounded page stored, moved there by SQL (a datetime cannot hold it).
PAST_THE_CALENDAR = {
    "year-10000": "UPDATE approvals_delegation SET ends_at = ends_at + interval '8000 years' "
    "WHERE id = %s",
    "before-year-1": "UPDATE approvals_delegation SET starts_at = starts_at - interval "
    "'2100 years' WHERE id = %s",
}


@pytest.mark.parametrize("statement", PAST_THE_CALENDAR.values(), ids=PAST_THE_CALENDAR.keys())
def test_a_window_stored_past_the_calendar_before_it_was_refused_breaks_nothing(
    pipeline: Pipeline, people: dict[str, User], statement: str
) -> None:
    """A row given before windows were bounded: psycopg cannot read it back, so it is in force
    for nobody, and every page and task that reads delegations goes on."""
    from django.db import connection

    from notifications.tasks import notify

    request = waiting(pipeline, "evt-stored-far")
    give(people)
    (stored,) = people["ana"].delegations_given.values_list("pk", flat=True)
    with connection.cursor() as cursor:
        cursor.execute(statement, [stored])
    ana, fred = Client(), Client()
    ana.force_login(people["ana"])
    fred.force_login(people["fred"])

    for client in (ana, fred):
        assert client.get(reverse("me:delegation")).status_code == 200
    assert fred.post(reverse("me:delegation"), {"end": stored}).status_code == 404
    notify()
    assert ana.get(reverse("approvals:evidence", args=[request.pk])).status_code == 200
    assert request not in selectors.visible_requests(people["fred"])
