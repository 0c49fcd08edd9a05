"""The tasks section (`tasks:*`, under /tasks/): the tasks a record effect keeps for a team,
as a list and as a task's own page, where a member takes it, gives it back, marks it done and
writes on its thread. Who reads and works which task: automation.effects.task_work."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from automation.effects.models import Task
from automation.effects.selectors import (
    TASK_OPEN,
    TASK_STATUSES,
    task_teams,
    task_thread,
    tasks_for,
)
from automation.effects.task_work import (
    READS_EVERY_TASK,
    may_read_task,
    may_work_task,
    task_claim,
    task_comment_add,
    task_done,
    task_release,
)
from automation.runs.comments import may_read_run
from console.refusals import show_refusal
from core.codes import Refusal
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.keyset import (
    NEWEST,
    BadCursor,
    Cursor,
    keyset_page,
    order_link,
    order_of,
    page_link,
    parse_cursor,
)

TASK_PAGE = 50
DONE_WORDS = {
    "claim": "You hold the task: the team sees it is yours.",
    "release": "Given back: the task waits for anyone in its team.",
    "done": "Marked done.",
}


@require_GET
@login_required
def task_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The tasks of the person's teams (every team's for whoever reads every run): the open
    ones unless asked for the done ones or both, oldest or newest first, fifty a page."""
    query, user = request.GET, request.user
    teams, reads_every_task = task_teams(user), user.has_perm(READS_EVERY_TASK)
    team = query.get("team", "")[:150]
    if team and team not in teams and not reads_every_task:
        team = ""  # a team the person is not in: the list of all they may see
    status = query.get("status", TASK_OPEN)
    status = status if status in TASK_STATUSES else TASK_OPEN
    order = order_of(query)
    page = keyset_page(
        tasks_for(user, team=team, status=status),
        time_field="created_at",
        size=TASK_PAGE,
        after=_position(query.get("after")),
        before=_position(query.get("before")),
        descending=order == NEWEST,
    )
    context = {
        "tasks": page.items,
        "teams": teams,
        "team": team,
        "status": status,
        "order": order,
        "other_order": order_link(query, "oldest" if order == NEWEST else NEWEST),
        "next_link": page_link(query, "after", page.next),
        "previous_link": page_link(query, "before", page.previous),
        "reads_every_task": reads_every_task,
    }
    return render(request, "tasks/list.html", context)


def _position(text: str | None) -> Cursor | None:
    """A page position from the address; a bad one shows the first page."""
    if not text:
        return None
    try:
        return parse_cursor(text)
    except BadCursor:
        return None


def _readable(request: AuthenticatedHttpRequest, task_id: int) -> Task:
    """The task, if the person may read it; 404 as for a task that does not exist."""
    task = Task.objects.select_related("run", "claimed_by", "done_by").filter(pk=task_id).first()
    if task is None or not may_read_task(request.user, task):
        raise Http404("no such task")
    return task


@require_GET
@login_required
def task_page(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    """A task: what it is, the run it came from, its parameters, who holds it, its thread."""
    task = _readable(request, task_id)
    user = request.user
    may_work = may_work_task(user, task)
    context = {
        "task": task,
        "may_work": may_work,
        "may_read_run": may_read_run(user, task.run_id),
        "comments": task_thread(task),
        "may_comment": may_work,
        "comment_action": reverse("tasks:comment", args=[task.pk]),
        "comment_record": "the task's record",
    }
    return render(request, "tasks/task.html", context)


@require_POST
@login_required
def task_action(request: AuthenticatedHttpRequest, task_id: int, action: str) -> HttpResponse:
    """Take the task, give it back, or mark it done (with the note posted)."""
    if action not in DONE_WORDS:
        raise Http404("no such action")
    task = _readable(request, task_id)
    if not may_work_task(request.user, task):
        raise PermissionDenied("you may read this task, not work on it")
    now, user = timezone.now(), request.user
    try:
        if action == "claim":
            task_claim(task_id=task.pk, user=user, now=now)
        elif action == "release":
            task_release(task_id=task.pk, user=user, now=now)
        else:
            task_done(task_id=task.pk, user=user, note=request.POST.get("note", ""), now=now)
    except ServiceError as exc:
        _refused(request, exc, prefix="Not done: " if action == "done" else "")
    else:
        messages.success(request, DONE_WORDS[action])
    return redirect("tasks:task", task_id=task.pk)


@require_POST
@login_required
def task_comment(request: AuthenticatedHttpRequest, task_id: int) -> HttpResponse:
    """Add a comment to the task's thread and go back to the task."""
    task = _readable(request, task_id)
    if not may_work_task(request.user, task):
        raise PermissionDenied("you may read this task, not comment on it")
    try:
        task_comment_add(
            task_id=task.pk,
            author=request.user,
            body=request.POST.get("body", ""),
            now=timezone.now(),
        )
    except ServiceError as exc:
        _refused(request, exc, prefix="Comment not added: ")
    else:
        messages.success(request, "Comment added to the task's thread.")
    return redirect(reverse("tasks:task", args=[task.pk]) + "#comments")


def _refused(request: AuthenticatedHttpRequest, exc: ServiceError, *, prefix: str) -> None:
    if exc.code == Refusal.FORBIDDEN:
        raise PermissionDenied(exc.message) from exc
    show_refusal(request, exc, prefix=prefix)
