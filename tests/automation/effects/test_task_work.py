"""A record effect's task worked by its team: taken, given back, done with a note, and
commented on, each under the task's row lock and audited; who may read and work which task."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from accounts.roles import roles_ensure
from audit.models import AuditAction, AuditEvent
from automation.effects.models import Task, TaskComment
from automation.effects.selectors import TASK_DONE, task_teams, tasks_for
from automation.effects.task_work import task_claim, task_comment_add, task_done, task_release
from core.codes import Refusal
from core.errors import ServiceError
from tests.approvals.claims import claims_channel
from tests.conftest import Pipeline, _user
from tests.team_work import DESK, claims_task


@pytest.fixture
def task(policy: None) -> Task:
    return claims_task(Pipeline(claims_channel()))


@pytest.fixture
def member(db: None) -> User:
    return _user("dana", DESK)


@pytest.fixture
def colleague(db: None) -> User:
    return _user("dev", DESK)


@pytest.fixture
def other_team(db: None) -> User:
    return _user("pia", "payments-desk")


def refused(action: Callable[[], object]) -> str:
    with pytest.raises(ServiceError) as caught:
        action()
    return caught.value.code


def test_the_record_effect_keeps_the_task_for_the_team_that_owns_the_route(task: Task) -> None:
    assert task.group == DESK
    assert task.route == "claims_desk"
    assert task.claimed_by is None and task.done_at is None


def test_a_member_takes_the_task_and_the_trail_says_so(task: Task, member: User) -> None:
    now = timezone.now()
    task_claim(task_id=task.pk, user=member, now=now)

    task.refresh_from_db()
    assert task.claimed_by == member and task.claimed_at == now
    event = AuditEvent.objects.get(action=AuditAction.TASK_CLAIMED)
    assert event.actor == member and event.run_id == task.run_id and event.data["task"] == task.pk


def test_a_task_someone_holds_is_not_taken_by_another(
    task: Task, member: User, colleague: User
) -> None:
    task_claim(task_id=task.pk, user=member, now=timezone.now())

    assert refused(lambda: task_claim(task_id=task.pk, user=colleague, now=timezone.now())) == (
        Refusal.CLAIMED
    )
    task.refresh_from_db()
    assert task.claimed_by == member


def test_another_team_does_not_see_the_task_at_all(task: Task, other_team: User) -> None:
    with pytest.raises(Task.DoesNotExist):
        task_claim(task_id=task.pk, user=other_team, now=timezone.now())
    assert not tasks_for(other_team).exists()
    assert AuditEvent.objects.filter(action__startswith="task.").count() == 0


def test_an_auditor_reads_every_task_and_works_on_none(task: Task) -> None:
    roles_ensure()
    auditor = _user("audrey", "auditors")

    assert list(tasks_for(auditor)) == [task]
    assert refused(lambda: task_claim(task_id=task.pk, user=auditor, now=timezone.now())) == (
        Refusal.FORBIDDEN
    )
    assert refused(
        lambda: task_comment_add(task_id=task.pk, author=auditor, body="hi", now=timezone.now())
    ) == (Refusal.FORBIDDEN)


def test_an_ops_lead_sees_every_team_and_may_free_a_task(task: Task, member: User) -> None:
    roles_ensure()
    lead = _user("olga", "ops-leads")
    task_claim(task_id=task.pk, user=member, now=timezone.now())

    assert DESK in task_teams(lead)
    assert list(tasks_for(lead, team=DESK)) == [task]
    assert not tasks_for(lead, team="payments-desk").exists()
    task_release(task_id=task.pk, user=lead, now=timezone.now())
    task.refresh_from_db()
    assert task.claimed_by is None


def test_only_the_holder_gives_a_task_back(task: Task, member: User, colleague: User) -> None:
    task_claim(task_id=task.pk, user=member, now=timezone.now())

    assert refused(lambda: task_release(task_id=task.pk, user=colleague, now=timezone.now())) == (
        Refusal.CLAIMED
    )
    task_release(task_id=task.pk, user=member, now=timezone.now())
    task.refresh_from_db()
    assert task.claimed_by is None
    assert refused(lambda: task_release(task_id=task.pk, user=member, now=timezone.now())) == (
        Refusal.STATE_CONFLICT
    )


def test_done_with_a_note_once_and_never_again(task: Task, member: User) -> None:
    task_claim(task_id=task.pk, user=member, now=timezone.now())
    task_done(task_id=task.pk, user=member, note="  Claim 4411 opened.  ", now=timezone.now())

    task.refresh_from_db()
    assert task.done_by == member and task.done_at is not None
    assert task.note == "Claim 4411 opened."
    assert list(tasks_for(member)) == []
    assert list(tasks_for(member, status=TASK_DONE)) == [task]
    event = AuditEvent.objects.get(action=AuditAction.TASK_DONE)
    assert event.data["note"] == "Claim 4411 opened."
    for again in (task_claim, task_release):
        assert refused(lambda a=again: a(task_id=task.pk, user=member, now=timezone.now())) == (
            Refusal.STATE_CONFLICT
        )
    assert refused(
        lambda: task_done(task_id=task.pk, user=member, note="", now=timezone.now())
    ) == (Refusal.STATE_CONFLICT)


def test_a_task_another_member_holds_is_not_marked_done(
    task: Task, member: User, colleague: User
) -> None:
    task_claim(task_id=task.pk, user=member, now=timezone.now())

    assert refused(
        lambda: task_done(task_id=task.pk, user=colleague, note="", now=timezone.now())
    ) == (Refusal.CLAIMED)


def test_an_open_task_done_at_once_is_held_by_who_did_it(task: Task, member: User) -> None:
    task_done(task_id=task.pk, user=member, note="", now=timezone.now())

    task.refresh_from_db()
    assert task.claimed_by == member and task.done_by == member


def test_a_note_too_long_is_refused_and_nothing_changes(task: Task, member: User) -> None:
    note = "x" * 2001
    assert refused(
        lambda: task_done(task_id=task.pk, user=member, note=note, now=timezone.now())
    ) == (Refusal.TOO_LONG)
    task.refresh_from_db()
    assert task.done_at is None


def test_a_comment_keeps_whom_it_mentions(task: Task, member: User, colleague: User) -> None:
    comment = task_comment_add(
        task_id=task.pk,
        author=member,
        body="@dev can you call the fleet office?",
        now=timezone.now(),
    )

    assert comment.mentions == {"users": [colleague.pk], "groups": []}
    assert AuditEvent.objects.get(action=AuditAction.TASK_COMMENTED).data["comment"] == comment.pk
    assert refused(
        lambda: task_comment_add(task_id=task.pk, author=member, body="  ", now=timezone.now())
    ) == (Refusal.COMMENT_REQUIRED)
    assert TaskComment.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_members_taking_a_task_at_once_one_holds_it(policy: None) -> None:
    task = claims_task(Pipeline(claims_channel()))
    people = [_user("dana", DESK), _user("dev", DESK)]
    barrier = threading.Barrier(2)
    codes: dict[str, str] = {}
    unexpected: list[BaseException] = []

    def take(user: User) -> None:
        try:
            barrier.wait(timeout=10)
            task_claim(task_id=task.pk, user=user, now=timezone.now())
            codes[user.username] = "held"
        except ServiceError as exc:
            codes[user.username] = exc.code
        except BaseException as exc:
            unexpected.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=(user,)) for user in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert unexpected == []
    assert sorted(codes.values()) == sorted(["held", Refusal.CLAIMED])
    winner = next(name for name, code in codes.items() if code == "held")
    task.refresh_from_db()
    assert task.claimed_by is not None and task.claimed_by.username == winner
    assert AuditEvent.objects.filter(action=AuditAction.TASK_CLAIMED).count() == 1
