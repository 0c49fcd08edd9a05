"""Comments on a run: a person writes on the run's thread, and may mention people or groups.

A comment is part of the run's record (a RunComment and an audit row, written together) and
changes nothing else: no state, no approval, no decision, and it never keeps its author from
approving the run (audit.models.NOT_A_HAND). Nothing is sent here: `mentions` is stored so
that a notification can find later whom a comment asked to read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.db import transaction
from django.db.models import Q

from approvals.models import ApprovalRequest
from approvals.selectors import visible_requests
from audit.models import AuditAction
from audit.services import audit_record
from automation.runs.models import Run, RunComment
from core.codes import Refusal
from core.errors import ServiceError
from core.limits import COMMENT, within
from policy.selectors import stored_businesses

# "@name": a username or a group's name, as stored. Not an e-mail address (a@b.c: the "@"
# follows a letter), and a full stop or hyphen at the end is the sentence's, not the name's.
MENTION = re.compile(r"(?<![\w.+@-])@(\w(?:[\w.+-]*\w)?)")


# Who works on runs, beside reading them: an auditor reads runs and their threads, and
# writes on neither.
WORKS_ON_RUNS = (
    "automation.work_queue",
    "automation.recover_run",
    "automation.correct_run",
    "approvals.decide_approvalrequest",
)


def owned_routes(groups: Iterable[str]) -> list[str]:
    """The routes of the active business that one of these groups owns (its catalogue's
    `routes.<name>.group`); none while no version is active (the reference catalogue is a
    sample, not anyone's business)."""
    businesses = stored_businesses()
    if businesses.active_version is None:
        return []
    names = set(groups)
    return sorted(name for name, route in businesses.active.routes.items() if route.group in names)


def user_routes(user: User) -> list[str]:
    """The routes the person's teams own in the active business."""
    return owned_routes(user.groups.values_list("name", flat=True))


def may_read_run(user: User, run_id: int) -> bool:
    """Whoever reads runs; an approver, a run with a request routed to one of their groups;
    and a member of the team that owns the run's route in the active business (their team's
    queue), no other route's. The run page's check, and whom a mention may tell of the run."""
    if user.has_perm("automation.view_run"):
        return True
    if (
        user.has_perm("approvals.view_approvalrequest")
        and visible_requests(user).filter(run_id=run_id).exists()
    ):
        return True
    routes = user_routes(user)
    return bool(routes) and Run.objects.filter(pk=run_id, route__in=routes).exists()


def group_may_read_run(group: str, run_id: int) -> bool:
    """Whether the group's own permissions let a member read the run, as `may_read_run`
    asks of a person: whom a group's chat may be told of it (a chat is no one to ask)."""
    granted = set(
        Permission.objects.filter(group__name=group).values_list(
            "content_type__app_label", "codename"
        )
    )
    if ("automation", "view_run") in granted:
        return True
    routes = owned_routes([group])
    if routes and Run.objects.filter(pk=run_id, route__in=routes).exists():
        return True
    if ("approvals", "view_approvalrequest") not in granted:
        return False
    requests = ApprovalRequest.objects.filter(run_id=run_id)
    if ("approvals", "view_all_approvalrequests") not in granted:
        # Routed to the group, or escalated to it (approvals.selectors.visible_requests).
        requests = requests.filter(
            Q(group=group) | Q(escalate_to=group, escalated_at__isnull=False)
        )
    return requests.exists()


def may_comment(user: User, run_id: int) -> bool:
    """Whoever reads the run's page and works on runs (not an auditor, who only reads), and
    an approver of a request of this run routed to one of their groups (who reaches the run
    from its evidence page)."""
    if user.has_perm("automation.view_run") and any(user.has_perm(p) for p in WORKS_ON_RUNS):
        return True
    return (
        user.has_perm("approvals.decide_approvalrequest")
        and visible_requests(user).filter(run_id=run_id).exists()
    )


def mentioned_names(body: str) -> list[str]:
    """Every "@name" of the text, once each, in the order written."""
    return list(dict.fromkeys(MENTION.findall(body)))


def mentions_of(body: str) -> dict[str, list[Any]]:
    """The active people and the groups the text names: {"users": [ids], "groups": [names]}.
    An "@word" that names neither stays plain text."""
    names = mentioned_names(body)
    if not names:
        return {"users": [], "groups": []}
    people = dict(
        User.objects.filter(username__in=names, is_active=True).values_list("username", "pk")
    )
    groups = set(Group.objects.filter(name__in=names).values_list("name", flat=True))
    return {
        "users": [people[name] for name in names if name in people],
        "groups": [name for name in names if name in groups],
    }


def body_pieces(body: str, marked: set[str]) -> list[tuple[str, bool]]:
    """The text in pieces, each "@name" of `marked` a piece of its own flagged True."""
    pieces: list[tuple[str, bool]] = []
    start = 0
    for found in MENTION.finditer(body):
        if found.group(1) not in marked:
            continue
        pieces.append((body[start : found.start()], False))
        pieces.append((found.group(0), True))
        start = found.end()
    pieces.append((body[start:], False))
    return [piece for piece in pieces if piece[0]]


def _checked(body: str) -> str:
    text = body.strip()
    if not text:
        raise ServiceError(Refusal.COMMENT_REQUIRED, "write something: the comment is empty")
    within(text, limit=COMMENT, what="the comment")
    return body


@transaction.atomic(durable=True)
def run_comment_add(*, run_id: int, author: User, body: str, now: datetime) -> RunComment:
    """Add a comment to the run's thread, with its audit row. The run is not locked: a
    comment changes nothing on it, so it neither waits for nor holds up a worker moving it."""
    run = Run.objects.only("pk").get(pk=run_id)
    if not may_comment(author, run.pk):
        raise ServiceError(Refusal.FORBIDDEN, "you may not comment on this run")
    comment = RunComment.objects.create(
        run=run, author=author, body=_checked(body), mentions=mentions_of(body), created_at=now
    )
    # The body is the comment's own; the trail says who wrote on which run and whom it named.
    audit_record(
        action=AuditAction.RUN_COMMENTED,
        actor=author,
        run_id=run.pk,
        comment=comment.pk,
        mentions=comment.mentions,
    )
    return comment
