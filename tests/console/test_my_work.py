"""My work: one list of what waits for the signed-in person (the approvals given to them or
waiting for their groups, the held runs they claimed, their QA samples), and what they
decided, with the binding they saw."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from approvals.services import approval_assign, approval_decide
from automation.models import Run
from tests.approvals.test_bulk import waiting
from tests.conftest import Pipeline, make_event


def person(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(*[Group.objects.get_or_create(name=name)[0] for name in groups])
    return user


@pytest.fixture
def world(pipeline: Pipeline) -> dict[str, object]:
    roles_ensure()
    mine = waiting(pipeline, "evt-mine")
    group = waiting(pipeline, "evt-group")
    theirs = waiting(pipeline, "evt-theirs")
    ana = person("ana", mine.group, "ops-leads")
    bruno = person("bruno", mine.group)
    lead = person("lead", "ops-leads")
    now = timezone.now()
    approval_assign(request_id=mine.pk, assignee=ana, by=lead, now=now)
    approval_assign(request_id=theirs.pk, assignee=bruno, by=lead, now=now)
    held_event = make_event(event_id="evt-held")
    pipeline.submit(held_event, [{"type": "timeout"}] * 3)
    held = Run.objects.get(event_id="evt-held")
    Run.objects.filter(pk=held.pk).update(owner=ana)
    return {"ana": ana, "mine": mine, "group": group, "theirs": theirs, "held": held}


def test_my_work_lists_what_waits_for_me_and_nothing_else(world: dict[str, object]) -> None:
    ana = world["ana"]
    assert isinstance(ana, User)
    client = Client()
    client.force_login(ana)
    page = client.get(reverse("me:work")).content.decode()

    assert "evt-mine" in page and "given to you" in page
    assert "evt-group" in page
    assert "evt-theirs" not in page  # held by a colleague: theirs
    held = world["held"]
    assert isinstance(held, Run)
    held.refresh_from_db()
    assert held.queue and f"Run {held.pk}</a>" in page
    assert "No sample waits for you." in page


def test_my_work_costs_the_same_queries_for_two_requests_as_for_twelve(
    pipeline: Pipeline, world: dict[str, object]
) -> None:
    ana = world["ana"]
    assert isinstance(ana, User)
    client = Client()
    client.force_login(ana)
    client.get(reverse("me:work"))
    cache.clear()  # both pages count the navigation's inbox afresh
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("me:work"))
    for n in range(10):
        waiting(pipeline, f"evt-more-{n}")
    cache.clear()
    with CaptureQueriesContext(connection) as many:
        page = client.get(reverse("me:work")).content.decode()
    assert page.count("evt-more-") == 10
    assert len(many.captured_queries) == len(few.captured_queries) <= 12


def test_decided_by_me_shows_the_binding_i_saw_and_what_came_of_it(
    pipeline: Pipeline, world: dict[str, object]
) -> None:
    ana, mine = world["ana"], world["mine"]
    assert isinstance(ana, User) and isinstance(mine, ApprovalRequest)
    with pipeline.capture():
        approval_decide(request_id=mine.pk, user=ana, approve=True, seen=mine.binding())
    pipeline.drain()
    other = world["group"]
    assert isinstance(other, ApprovalRequest)
    with pipeline.capture():
        approval_decide(
            request_id=other.pk,
            user=ana,
            approve=True,
            seen=replace(other.binding(), fingerprint="0" * 64),
        )
    client = Client()
    client.force_login(ana)
    page = client.get(reverse("me:decided")).content.decode()
    assert f"#{mine.pk} · evt-mine" in page and "approved" in page
    assert mine.fingerprint[:12] in page and mine.policy_version in page
    assert f"#{other.pk} · evt-group" in page and "not used" in page
