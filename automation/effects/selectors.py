"""The outbox as staff see it: each effect's control and its backlog."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Count, Q, QuerySet

from automation.effects.models import Effect, EffectControl, EffectStatus, Task, TaskComment
from automation.effects.task_work import READS_EVERY_TASK, group_names
from automation.runs.selectors import ShownComment, shown
from policy.selectors import stored_businesses

# Who reads what a receiver answered (the start of its body, kept with the effect and its
# attempts): the people who handle deliveries, to diagnose one. It is another system's text,
# which may carry its data or its internals: auditors and approvers see the status only.
TECHNICAL_DETAIL_PERMISSIONS = ("automation.recover_run", "automation.change_effectcontrol")


def sees_effect_answers(user: User | AnonymousUser) -> bool:
    """Whether `user` may read the receivers' answers to effects."""
    return any(user.has_perm(permission) for permission in TECHNICAL_DETAIL_PERMISSIONS)


@dataclass(frozen=True)
class EffectState:
    name: str
    paused: bool
    rate_per_minute: int | None
    waiting: int
    held: int


def effect_controls() -> list[EffectState]:
    """Each effect of the active catalogue, with deliveries in the outbox or with a control:
    paused or not, and its backlog."""
    counts = {
        row["name"]: row
        for row in Effect.objects.filter(status__in=[EffectStatus.PENDING, EffectStatus.RETRY_WAIT])
        .values("name")
        .annotate(
            # Counting names (never null), not ids: every column read is in effect_due_idx,
            # an index-only scan.
            waiting=Count("name", filter=Q(next_attempt_at__isnull=False) | Q(attempts=0)),
            held=Count("name", filter=Q(next_attempt_at__isnull=True, attempts__gt=0)),
        )
    }
    controls = {c.name: c for c in EffectControl.objects.all()}
    # The active catalogue's effects, and any other the outbox or a control still holds.
    names = sorted(set(counts) | set(controls) | set(stored_businesses().active.effects))
    return [
        EffectState(
            name=name,
            paused=bool(controls.get(name) and controls[name].paused),
            rate_per_minute=controls[name].rate_per_minute if name in controls else None,
            waiting=counts.get(name, {}).get("waiting", 0),
            held=counts.get(name, {}).get("held", 0),
        )
        for name in names
    ]


# --- a team's tasks (automation.effects.task_work says who reads which) ----------------------

TASK_OPEN, TASK_DONE, TASK_ANY = "open", "done", "all"
TASK_STATUSES = (TASK_OPEN, TASK_DONE, TASK_ANY)


def task_teams(user: User) -> list[str]:
    """The teams whose tasks the person reads, by name: their own groups, or every group
    that has a task for whoever reads every task."""
    if user.has_perm(READS_EVERY_TASK):
        return sorted(
            set(Task.objects.exclude(group="").values_list("group", flat=True).distinct()[:500])
        )
    return sorted(group_names(user))


def tasks_for(user: User, *, team: str = "", status: str = TASK_OPEN) -> QuerySet[Task]:
    """The tasks the person reads, of one team or of all they may see, open or done or both:
    run and holder joined (task_group_created_idx, task_open_created_idx)."""
    tasks = Task.objects.select_related("claimed_by", "done_by", "run")
    if not user.has_perm(READS_EVERY_TASK):
        tasks = tasks.filter(group__in=group_names(user))
    if team:
        tasks = tasks.filter(group=team)
    if status == TASK_OPEN:
        tasks = tasks.filter(done_at__isnull=True)
    elif status == TASK_DONE:
        tasks = tasks.filter(done_at__isnull=False)
    return tasks


def task_thread(task: Task) -> list[ShownComment]:
    """The task's comments, oldest first, with their authors and their mentions marked: two
    queries whatever the number of comments (task_comment_thread_idx)."""
    comments = list(TaskComment.objects.filter(task=task).select_related("author")[:500])
    mentioned = {pk for c in comments for pk in c.mentions.get("users", [])}
    people = User.objects.filter(pk__in=mentioned).values_list("pk", "username")
    return shown(comments, dict(people) if mentioned else {})
