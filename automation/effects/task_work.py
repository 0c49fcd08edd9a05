"""A record effect's task, worked by the team it is for: taken (claimed), given back, done
with a note, and talked about on its own thread.

Who may do what, by the groups a person is in and the permissions they hold, never by a
staff flag:
- a member of the task's group reads it and works on it;
- whoever reads every run (`automation.view_run`: ops leads, recovery staff, auditors) reads
  every task; those of them who work queues (`automation.work_queue`) work on any task, one
  whose group has nobody at work included. An auditor reads and writes nothing.

Every change locks the task's row first (`select_for_update`) and checks its state under
that lock, so two people taking the same task at once take turns: the second finds it taken
and is refused, and a task never has two holders or is done twice. Each change writes its
audit row on the task's run in the same transaction.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from audit.models import AuditAction
from audit.services import audit_record
from automation.effects.models import Task, TaskComment
from automation.runs.comments import mentions_of
from core.codes import Refusal
from core.errors import ServiceError
from core.limits import COMMENT, NOTE, within

READS_EVERY_TASK = "automation.view_run"
WORKS_ANY_TASK = "automation.work_queue"


def group_names(user: User) -> set[str]:
    """The names of the groups the person is in (one query)."""
    return set(user.groups.values_list("name", flat=True))


def may_read_task(user: User, task: Task) -> bool:
    """A member of the task's group, or whoever reads every run."""
    if user.has_perm(READS_EVERY_TASK):
        return True
    return bool(task.group) and task.group in group_names(user)


def may_work_task(user: User, task: Task) -> bool:
    """A member of the task's group, or whoever reads every run and works queues."""
    if user.has_perm(READS_EVERY_TASK) and user.has_perm(WORKS_ANY_TASK):
        return True
    return bool(task.group) and task.group in group_names(user)


def _locked(task_id: int, user: User) -> Task:
    """The task under its row lock, once the person may work on it. A task they may not read
    is refused as if it did not exist."""
    task = Task.objects.select_for_update(of=("self",)).select_related("claimed_by").get(pk=task_id)
    if not may_read_task(user, task):
        raise Task.DoesNotExist("no such task")
    if not may_work_task(user, task):
        raise ServiceError(Refusal.FORBIDDEN, "you may read this task, not work on it")
    return task


def _holder(task: Task) -> str:
    return task.claimed_by.get_username() if task.claimed_by is not None else "someone"


def _open(task: Task) -> None:
    if task.done_at is not None:
        raise ServiceError(Refusal.STATE_CONFLICT, "the task is done already")


@transaction.atomic(durable=True)
def task_claim(*, task_id: int, user: User, now: datetime) -> Task:
    """Take an open task nobody holds. Under the row lock: of two people taking it at once,
    one holds it and the other is told who does."""
    task = _locked(task_id, user)
    _open(task)
    if task.claimed_by_id == user.pk:
        raise ServiceError(Refusal.STATE_CONFLICT, "you hold this task already")
    if task.claimed_by_id is not None:
        raise ServiceError(Refusal.CLAIMED, f"{_holder(task)} has taken this task")
    task.claimed_by, task.claimed_at = user, now
    task.save(update_fields=["claimed_by", "claimed_at"])
    audit_record(action=AuditAction.TASK_CLAIMED, actor=user, run_id=task.run_id, task=task.pk)
    return task


@transaction.atomic(durable=True)
def task_release(*, task_id: int, user: User, now: datetime) -> Task:
    """Give a task back to its team: its holder does, or whoever works any task (a lead
    freeing the task of someone away)."""
    task = _locked(task_id, user)
    _open(task)
    if task.claimed_by_id is None:
        raise ServiceError(Refusal.STATE_CONFLICT, "nobody holds this task")
    if task.claimed_by_id != user.pk and not user.has_perm(WORKS_ANY_TASK):
        raise ServiceError(Refusal.CLAIMED, f"{_holder(task)} holds this task, not you")
    holder = task.claimed_by_id
    task.claimed_by, task.claimed_at = None, None
    task.save(update_fields=["claimed_by", "claimed_at"])
    audit_record(
        action=AuditAction.TASK_RELEASED,
        actor=user,
        run_id=task.run_id,
        task=task.pk,
        held_by=holder,
        at=now.isoformat(),
    )
    return task


@transaction.atomic(durable=True)
def task_done(*, task_id: int, user: User, note: str, now: datetime) -> Task:
    """Mark an open task done, with an optional note: its holder does, or anyone who may
    work on it while nobody holds it (who then holds it too)."""
    task = _locked(task_id, user)
    _open(task)
    if task.claimed_by_id is not None and task.claimed_by_id != user.pk:
        raise ServiceError(Refusal.CLAIMED, f"{_holder(task)} holds this task: ask them")
    note = within(note.strip(), limit=NOTE, what="the note")
    if task.claimed_by_id is None:
        task.claimed_by, task.claimed_at = user, now
    task.done_by, task.done_at, task.note = user, now, note
    task.save(update_fields=["claimed_by", "claimed_at", "done_by", "done_at", "note"])
    audit_record(
        action=AuditAction.TASK_DONE, actor=user, run_id=task.run_id, task=task.pk, note=note
    )
    return task


@transaction.atomic(durable=True)
def task_comment_add(*, task_id: int, author: User, body: str, now: datetime) -> TaskComment:
    """Add a comment to the task's thread, with the people and groups it mentions. The task is
    not locked: a comment changes nothing on it."""
    task = Task.objects.get(pk=task_id)
    if not may_read_task(author, task):
        raise Task.DoesNotExist("no such task")
    if not may_work_task(author, task):
        raise ServiceError(Refusal.FORBIDDEN, "you may read this task, not comment on it")
    if not body.strip():
        raise ServiceError(Refusal.COMMENT_REQUIRED, "write something: the comment is empty")
    within(body.strip(), limit=COMMENT, what="the comment")
    comment = TaskComment.objects.create(
        task=task, author=author, body=body, mentions=mentions_of(body), created_at=now
    )
    audit_record(
        action=AuditAction.TASK_COMMENTED,
        actor=author,
        run_id=task.run_id,
        task=task.pk,
        comment=comment.pk,
        mentions=comment.mentions,
    )
    return comment
