"""A team's work in the console, for a business of the tests' own (the insurer of
tests/approvals/claims): its tasks as a list and a page (take, give back, done, comments),
its own queue of held runs, and a person's notifications with the unread count on every page.
A member of a team needs no staff flag and no admin for any of it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.effects.models import Task, TaskComment
from automation.effects.task_work import task_comment_add
from automation.intake.services import intake_submit
from notifications.models import Kind, Notification
from notifications.services import notifications_find
from tests.approvals.claims import CORRECTED, VAN_MAIL_ID, claims_channel, van_mail
from tests.conftest import Pipeline, _user
from tests.team_work import DESK, claims_task, held_claim, unsure_of_claims


@pytest.fixture
def claims(policy: None) -> Pipeline:
    roles_ensure()
    return Pipeline(claims_channel())


@pytest.fixture
def task(claims: Pipeline) -> Task:
    return claims_task(claims)


@pytest.fixture
def member(db: None) -> User:
    return _user("dana", DESK)


@pytest.fixture
def other_team(db: None) -> User:
    return _user("pia", "payments-desk")


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_member_sees_the_teams_tasks_and_another_team_sees_none(
    task: Task, member: User, other_team: User
) -> None:
    assert not member.is_staff
    page = signed_in(member).get(reverse("tasks:list"))
    assert page.status_code == 200
    assert "Claim: van damaged in the depot" in page.content.decode()
    assert f"task-row-{task.pk}" in page.content.decode()

    theirs = signed_in(other_team)
    assert f"task-row-{task.pk}" not in theirs.get(reverse("tasks:list")).content.decode()
    assert theirs.get(reverse("tasks:task", args=[task.pk])).status_code == 404
    claim = reverse("tasks:action", args=[task.pk, "claim"])
    assert theirs.post(claim).status_code == 404
    assert (
        theirs.post(reverse("tasks:comment", args=[task.pk]), {"body": "mine"}).status_code == 404
    )
    task.refresh_from_db()
    assert task.claimed_by is None and not TaskComment.objects.exists()


def test_a_team_member_lands_on_the_teams_tasks(member: User) -> None:
    answer = signed_in(member).get(reverse("home"))
    assert answer.status_code == 302 and answer["Location"] == reverse("tasks:list")


def test_the_task_page_says_what_it_asks_in_words_and_links_its_run(
    task: Task, member: User
) -> None:
    page = signed_in(member).get(reverse("tasks:task", args=[task.pk])).content.decode()
    assert "Open a claim" in page  # the effect's label, not its code
    assert "Claims desk" in page  # the route's label
    assert "LX21 VAN" in page  # the registration the reading found
    # The claims desk owns the run's route: the run is theirs to read.
    assert reverse("runs:run", args=[task.run_id]) in page


def test_a_member_takes_a_task_and_marks_it_done_with_a_note(task: Task, member: User) -> None:
    client = signed_in(member)
    page = reverse("tasks:task", args=[task.pk])

    assert client.post(reverse("tasks:action", args=[task.pk, "claim"])).status_code == 302
    assert "Taken by dana" in client.get(page).content.decode()
    done = client.post(reverse("tasks:action", args=[task.pk, "done"]), {"note": "Claim 88 open"})
    assert done.status_code == 302

    task.refresh_from_db()
    assert task.done_by == member and task.note == "Claim 88 open"
    shown = client.get(page).content.decode()
    assert "Done by dana" in shown and "Claim 88 open" in shown
    assert f"task-row-{task.pk}" not in client.get(reverse("tasks:list")).content.decode()
    done_list = client.get(reverse("tasks:list"), {"status": "done"}).content.decode()
    assert f"task-row-{task.pk}" in done_list


def test_a_refused_action_says_why_and_changes_nothing(task: Task, member: User) -> None:
    colleague = _user("dev", DESK)
    signed_in(colleague).post(reverse("tasks:action", args=[task.pk, "claim"]))

    answer = signed_in(member).post(
        reverse("tasks:action", args=[task.pk, "done"]), {"note": "x"}, follow=True
    )
    assert "Not done: Dev holds this task: ask them." in answer.content.decode()
    task.refresh_from_db()
    assert task.done_at is None and task.claimed_by == colleague


def test_a_comment_goes_on_the_tasks_thread_and_an_empty_one_is_refused(
    task: Task, member: User
) -> None:
    client = signed_in(member)
    url = reverse("tasks:comment", args=[task.pk])

    client.post(url, {"body": "Called the fleet office @payments-desk"})
    empty = client.post(url, {"body": "   "}, follow=True)

    assert "the comment is empty" in empty.content.decode()
    comment = TaskComment.objects.get()
    assert comment.mentions == {"users": [], "groups": ["payments-desk"]}
    page = client.get(reverse("tasks:task", args=[task.pk])).content.decode()
    assert "Called the fleet office" in page


def test_a_mention_on_a_task_tells_who_may_read_the_task_only(
    task: Task, member: User, other_team: User
) -> None:
    colleague = _user("dev", DESK, email="dev@insurer.example")
    other_team.email = "pia@insurer.example"
    other_team.save()
    signed_in(member).post(
        reverse("tasks:comment", args=[task.pk]), {"body": "@dev and @pia: look at this"}
    )

    notifications_find(now=timezone.now())

    told = Notification.objects.filter(kind=Kind.MENTIONED)
    assert [(n.user_id, n.task_id) for n in told] == [(colleague.pk, task.pk)]
    assert reverse("tasks:task", args=[task.pk]) in told.get().body


def test_an_ops_lead_sees_every_team_with_a_filter(task: Task) -> None:
    lead = _user("olga", "ops-leads")
    client = signed_in(lead)

    assert f"task-row-{task.pk}" in client.get(reverse("tasks:list")).content.decode()
    assert (
        f"task-row-{task.pk}" in client.get(reverse("tasks:list"), {"team": DESK}).content.decode()
    )
    other = client.get(reverse("tasks:list"), {"team": "payments-desk"}).content.decode()
    assert f"task-row-{task.pk}" not in other


def test_the_teams_queue_shows_its_routes_held_runs_and_another_teams_stay_closed(
    claims: Pipeline, member: User, other_team: User
) -> None:
    unsure_of_claims()
    run = held_claim(claims)

    mine = signed_in(member)
    queue = mine.get(reverse("me:team_queue")).content.decode()
    assert f"team-queue-row-{run.pk}" in queue
    assert "Claim</button>" not in queue  # read-only: they may not work queues
    assert mine.get(reverse("runs:run", args=[run.pk])).status_code == 200

    theirs = signed_in(other_team)
    assert f"team-queue-row-{run.pk}" not in theirs.get(reverse("me:team_queue")).content.decode()
    assert theirs.get(reverse("runs:run", args=[run.pk])).status_code == 403
    assert theirs.get(reverse("queues:list")).status_code == 403


def _waiting_for_a_manager(claims: Pipeline) -> tuple[User, User]:
    """A claims manager and a payments approver, the manager told of a request waiting."""
    manager = _user("clara", "claims-managers", email="clara@insurer.example")
    payer = _user("pat", "payments-approvers", email="pat@insurer.example")
    with claims.capture():
        result = intake_submit(
            channel=claims.channel, raw=van_mail(), content_type="message/rfc822", source="test"
        )
    assert result.run is not None
    claims.record(result.run.event_id, [{"type": "decision", "value": CORRECTED}])
    claims.drain()
    notifications_find(now=timezone.now())
    return manager, payer


def test_my_notifications_list_what_i_was_told_with_a_link_and_an_unread_count(
    claims: Pipeline,
) -> None:
    manager, payer = _waiting_for_a_manager(claims)
    mine = Notification.objects.get(user=manager)
    cache.clear()

    client = signed_in(manager)
    page = client.get(reverse("me:notification_list")).content.decode()
    assert f"notification-{mine.pk}" in page
    assert reverse("approvals:evidence", args=[mine.approval_id]) in page
    assert 'data-testid="nav-unread-count">1<' in page
    theirs = signed_in(payer).get(reverse("me:notification_list")).content.decode()
    assert f"notification-{mine.pk}" not in theirs

    # Another person's notification is not theirs to mark.
    signed_in(payer).post(reverse("me:notification_read"), {"notification": mine.pk})
    mine.refresh_from_db()
    assert mine.read_at is None

    client.post(reverse("me:notification_read"), {"notification": mine.pk})
    mine.refresh_from_db()
    assert mine.read_at is not None
    after = client.get(reverse("tasks:list")).content.decode()  # any page: the count is there
    assert 'data-testid="nav-unread-count">0<' in after
    unread = client.get(reverse("me:notification_list"), {"show": "unread"}).content.decode()
    assert f"notification-{mine.pk}" not in unread


def test_mark_all_read_marks_only_my_own(claims: Pipeline) -> None:
    second = _user("cleo", "claims-managers", email="cleo@insurer.example")
    manager, _ = _waiting_for_a_manager(claims)

    signed_in(manager).post(reverse("me:notification_read"), {"all": "1"})

    assert Notification.objects.get(user=manager).read_at is not None
    assert Notification.objects.get(user=second).read_at is None


def _queries(client: Client, url: str) -> int:
    client.get(url)  # sessions, permission caches and the like are warm, as in use
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200, url
    return len(captured)


def _another_task(claims: Pipeline, number: int, author: User) -> Task:
    mail = van_mail().replace(VAN_MAIL_ID.encode(), f"<van-{number}@fleet.example>".encode())
    task = claims_task(claims, mail=mail)
    task_comment_add(task_id=task.pk, author=author, body=f"@dev look {number}", now=timezone.now())
    return task


def test_the_team_pages_cost_the_same_queries_for_three_tasks_as_for_one(
    claims: Pipeline, member: User
) -> None:
    colleague = _user("dev", DESK, email="dev@insurer.example")
    first = _another_task(claims, 1, member)
    client = signed_in(colleague)
    pages = [
        reverse("tasks:list"),
        reverse("tasks:list") + "?status=all&order=newest",
        reverse("tasks:task", args=[first.pk]),
        reverse("me:notification_list"),
        reverse("me:team_queue"),
    ]
    notifications_find(now=timezone.now())
    with_one = [_queries(client, url) for url in pages]

    for number in (2, 3):
        _another_task(claims, number, member)
        task_comment_add(task_id=first.pk, author=member, body="and @dev", now=timezone.now())
    notifications_find(now=timezone.now())
    with_three = [_queries(client, url) for url in pages]

    assert with_three == with_one
    assert Notification.objects.filter(user=colleague).count() == 5
