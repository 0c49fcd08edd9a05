"""Finding what people should hear of, and telling them by e-mail.

`notifications_find` writes a row for each (event, person) that has none yet; the unique key
makes two finders at the same moment write one row. `notifications_send` sends the rows that
are due, each under a row lock (SKIP LOCKED: two senders never take the same row), and retries
a failed one with backoff. `notifications_digest` sends each person who asked for a digest one
message with what waited for them.

The events, each read from the approvals and runs as they are:
- a request waits for a group (each member is told);
- its time to decide is nearly up: the last part (GATEHOUSE_NOTIFY_NEAR, a quarter) of the
  time policy gives before it escalates;
- it escalated (the members of the group it escalated to);
- it is about to expire: the same last part of the time before it expires;
- a run someone owns (claimed from a queue) is held again;
- a comment mentions people or groups: those of them who may read the run (the run page's
  check), never the writer.

Whatever sending one row raises is that row's failure (retried, then given up), never the
queue's: a malformed address stops no one else's mail.

A message says what is asked, of whom and by when, with a link to the evidence; it never
carries a decision (no link decides anything). It is written from the templates of
notifications/templates/notifications/ (`<kind>.subject.txt`, `<kind>.txt`) in the console's
words (policy.words: the effect's and request type's labels, the group's name, why a run is
held), never in codes, and sent by core.mail; a chat is posted to by core.egress's
send_request; a failed row waits core.backoff's time.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import (
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
)
from django.urls import reverse

from approvals.models import ApprovalRequest, ApprovalStatus, Delegation
from approvals.selectors import delegations
from audit.models import AuditAction, AuditEvent
from audit.services import audit_record
from automation.conf import setting
from automation.effects.task_work import may_read_task
from automation.models import Run, RunComment, State, TaskComment
from automation.runs.comments import group_may_read_run, may_read_run
from core.backoff import backoff_delay
from core.egress import send_request
from core.mail import Text, message, one_line, render, send, send_templated
from notifications.models import Channel, Kind, Mode, Notification, Preference, Status
from policy.words import business_term, group_term, outcome_term

logger = logging.getLogger("gatehouse.notifications")

# Events looked at per kind per pass (oldest first): the rest are found by the next pass.
FIND_LIMIT = 500
SEND_LIMIT = 200
MAX_ATTEMPTS = 6
# A failed row waits core.backoff's time: up to 30 s after the first failure, doubling, at
# most an hour.
BACKOFF_BASE_SECONDS = 30
BACKOFF_CAP_SECONDS = 3600
# Seconds a chat's webhook has to answer.
WEBHOOK_TIMEOUT = 10
# A digest lists this many things, each line cut at DIGEST_LINE characters, and says how many
# more there are (20,000 things once made one message of 15 MB).
DIGEST_ITEMS = 50
DIGEST_LINE = 300


def near_fraction() -> float:
    return setting("NOTIFY_NEAR")


def base_url() -> str:
    return setting("BASE_URL").rstrip("/")


# --- finding ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    kind: Kind
    key: str  # the event, without the person
    run_id: int | None
    approval: ApprovalRequest | None
    groups: tuple[str, ...] = ()  # told as members of these groups
    owner_id: int | None = None  # or told as the run's owner
    people: tuple[int, ...] = ()  # or told by name (a comment's mentions)
    comment: RunComment | None = None
    task_comment: TaskComment | None = None  # or a comment on a task's thread
    delegation: Delegation | None = None

    @property
    def author_id(self) -> int | None:
        """Who wrote the comment the event is about (none for any other event)."""
        written = self.comment or self.task_comment
        return written.author_id if written is not None else None


def notifications_find(*, now: datetime) -> int:
    """Write a row for each event and person not told yet; the number of rows offered (a
    row another finder wrote first is not written twice)."""
    events = [
        *_waiting(now),
        *_assigned(now),
        *_sla_near(now),
        *_escalated(now),
        *_expiring(now),
        *_held(),
        *_mentioned(now),
        *_task_mentioned(now),
        *_delegated(now),
    ]
    if not events:
        return 0
    members = _members({g for e in events for g in e.groups})
    users = {u for e in events for g in e.groups for u in members.get(g, ())}
    users |= {e.owner_id for e in events if e.owner_id is not None}
    users |= {uid for e in events for uid in e.people}
    modes = _modes(users)
    runs = _runs({e.run_id for e in events if e.run_id is not None})
    readers = _readers(events, members)
    task_readers = _task_readers(events, members)
    rows = []
    for event in events:
        told = [(uid, g) for g in event.groups for uid in members.get(g, ())]
        if event.owner_id is not None:
            told.append((event.owner_id, ""))
        told = [(uid, "") for uid in event.people] + told  # named first: told by name
        if event.author_id is not None:  # the writer is not told of their own words
            told = [(uid, g) for uid, g in told if uid != event.author_id]
        if event.comment is not None:
            # A mention gives no right to read: who may not read the run is not told of it.
            told = [(uid, g) for uid, g in told if (uid, event.run_id) in readers]
        if event.task_comment is not None:  # nor who may not read the task, of it
            told = [
                (uid, g) for uid, g in told if (uid, event.task_comment.task_id) in task_readers
            ]
        seen: set[int] = set()
        for user_id, group in told:
            if user_id in seen:  # in two of the groups: told once
                continue
            seen.add(user_id)
            mode = modes.get((user_id, event.kind), Mode.IMMEDIATE)
            subject, body = notification_text(event, group, runs.get(event.run_id or 0))
            rows.append(
                Notification(
                    key=f"{event.key}:{user_id}",
                    kind=event.kind,
                    user_id=user_id,
                    group=group,
                    run_id=event.run_id,
                    approval=event.approval,
                    task_id=event.task_comment.task_id if event.task_comment else None,
                    subject=one_line(subject)[:300],
                    body=body,
                    status={
                        Mode.OFF: Status.OFF,
                        Mode.DIGEST: Status.DIGEST,
                    }.get(Mode(mode), Status.PENDING),
                    next_attempt_at=now,
                    created_at=now,
                )
            )
        rows += _chat_rows(event, runs.get(event.run_id or 0), now)
    Notification.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    return len(rows)


def webhooks() -> dict[str, tuple[Channel, str]]:
    """The chat each group is told in, from GATEHOUSE_NOTIFY_WEBHOOKS:
    'finance-approvers=slack:https://hooks.slack.com/services/...,ops=teams:https://...'."""
    found = {}
    for group, value in setting("NOTIFY_WEBHOOKS").items():
        shape, _, url = str(value).partition(":")
        if shape in (Channel.SLACK, Channel.TEAMS) and url.startswith(("https://", "http://")):
            found[group] = (Channel(shape), url)
    return found


def _chat_rows(event: Event, run: dict[str, Any] | None, now: datetime) -> list[Notification]:
    chats = webhooks()
    rows = []
    for group in event.groups:
        if group not in chats:
            continue
        if event.comment is not None and not group_may_read_run(group, event.run_id or 0):
            continue  # a group that may not read the run: its chat is not told of a mention
        if event.task_comment is not None and group != event.task_comment.task.group:
            continue  # a task's thread: only its own team's chat is told of a mention
        subject, body = notification_text(event, group, run, personal=False)
        rows.append(
            Notification(
                key=f"{event.key}:group:{group}",
                kind=event.kind,
                channel=chats[group][0],
                group=group,
                run_id=event.run_id,
                approval=event.approval,
                subject=one_line(subject)[:300],
                body=body,
                next_attempt_at=now,
                created_at=now,
            )
        )
    return rows


def _untold(requests: QuerySet[ApprovalRequest], kind: Kind) -> QuerySet[ApprovalRequest]:
    told = Notification.objects.filter(approval=OuterRef("pk"), kind=kind)
    return requests.filter(status=ApprovalStatus.PENDING).exclude(Exists(told))


def _in_last_part(requests: QuerySet[ApprovalRequest], due: str, now: datetime) -> Any:
    """The requests for which `now` is within the last part (near_fraction) of the time from
    their creation to their `due` column: due - (due - created) * fraction <= now."""
    window = ExpressionWrapper(
        (F(due) - F("created_at")) * Value(near_fraction()), output_field=DurationField()
    )
    starts = ExpressionWrapper(F(due) - window, output_field=DateTimeField())
    return requests.annotate(near_from=starts).filter(near_from__lte=now)


def _waiting(now: datetime) -> Iterable[Event]:
    requests = _untold(ApprovalRequest.objects.all(), Kind.WAITING).order_by("created_at")
    for request in requests[:FIND_LIMIT]:
        yield Event(
            Kind.WAITING, f"waiting:{request.pk}", request.run_id, request, (request.group,)
        )


# Hand-offs looked at: those of the last two days (a pass every minute).
HANDOFF_WINDOW = timedelta(days=2)


def _assigned(now: datetime) -> Iterable[Event]:
    """Requests a lead gave to someone (each hand-off once, to the person it was given to),
    while they are still pending and still theirs."""
    handoffs = list(
        AuditEvent.objects.filter(
            action=AuditAction.APPROVAL_ASSIGNED, created_at__gte=now - HANDOFF_WINDOW
        )
        .order_by("created_at")
        .values_list("pk", "approval_id", "data")[:FIND_LIMIT]
    )
    found = {
        f"assigned:{pk}:{data.get('assignee')}": (pk, approval_id, data.get("assignee"))
        for pk, approval_id, data in handoffs
    }
    told = set(Notification.objects.filter(key__in=found).values_list("key", flat=True))
    wanted = {a for key, (_, a, _) in found.items() if key not in told}
    requests = ApprovalRequest.objects.in_bulk(wanted)
    for key, (pk, approval_id, assignee) in found.items():
        request = requests.get(approval_id)
        if key in told or request is None or request.status != ApprovalStatus.PENDING:
            continue
        if request.assignee_id != assignee:  # given to someone else since
            continue
        yield Event(
            Kind.ASSIGNED, f"assigned:{pk}", request.run_id, request, owner_id=int(assignee)
        )


def _sla_near(now: datetime) -> Iterable[Event]:
    requests = _untold(ApprovalRequest.objects.all(), Kind.SLA_NEAR).filter(
        escalated_at__isnull=True, escalate_at__gt=now
    )
    for request in _in_last_part(requests, "escalate_at", now).order_by("escalate_at")[:FIND_LIMIT]:
        yield Event(
            Kind.SLA_NEAR, f"sla_near:{request.pk}", request.run_id, request, (request.group,)
        )


def _escalated(now: datetime) -> Iterable[Event]:
    requests = _untold(ApprovalRequest.objects.all(), Kind.ESCALATED).filter(
        escalated_at__isnull=False
    )
    for request in requests.exclude(escalate_to="").order_by("escalated_at")[:FIND_LIMIT]:
        yield Event(
            Kind.ESCALATED,
            f"escalated:{request.pk}",
            request.run_id,
            request,
            (request.escalate_to,),
        )


def _expiring(now: datetime) -> Iterable[Event]:
    requests = _untold(ApprovalRequest.objects.all(), Kind.EXPIRING).filter(expires_at__gt=now)
    for request in _in_last_part(requests, "expires_at", now).order_by("expires_at")[:FIND_LIMIT]:
        yield Event(
            Kind.EXPIRING,
            f"expiring:{request.pk}",
            request.run_id,
            request,
            tuple(request.visible_groups()),
        )


def _held() -> Iterable[Event]:
    """Owned runs that are held, each hold once (its audit row names it)."""
    last_hold = AuditEvent.objects.filter(run_id=OuterRef("pk"), to_state=State.NEEDS_REVIEW)
    runs = (
        Run.objects.filter(state=State.NEEDS_REVIEW, owner__isnull=False)  # run_owner_idx
        .annotate(hold=Subquery(last_hold.order_by("-pk").values("pk")[:1]))
        .exclude(hold__isnull=True)
        .values_list("pk", "owner_id", "hold")[:FIND_LIMIT]
    )
    found = {f"held:{hold}:{owner_id}": (run_id, owner_id, hold) for run_id, owner_id, hold in runs}
    told = set(Notification.objects.filter(key__in=found).values_list("key", flat=True))
    for key, (run_id, owner_id, hold) in found.items():
        if key not in told:
            yield Event(Kind.HELD, f"held:{hold}", run_id, None, owner_id=owner_id)


# Comments looked at for mentions: those of the last two days (a pass every minute).
MENTION_WINDOW = timedelta(days=2)
NO_MENTIONS: dict[str, list[object]] = {"users": [], "groups": []}


def _mentioned(now: datetime) -> Iterable[Event]:
    """Comments that mention people or groups, each told once (run_comment_mentions_idx)."""
    comments = list(
        RunComment.objects.filter(created_at__gte=now - MENTION_WINDOW)
        .exclude(mentions=NO_MENTIONS)
        .select_related("author")
        .order_by("created_at")[:FIND_LIMIT]
    )
    for comment in comments:
        mentions = comment.mentions or {}
        yield Event(
            Kind.MENTIONED,
            f"mentioned:{comment.pk}",
            comment.run_id,
            None,
            groups=tuple(str(g) for g in mentions.get("groups", [])),
            people=tuple(int(u) for u in mentions.get("users", [])),
            comment=comment,
        )


def _task_mentioned(now: datetime) -> Iterable[Event]:
    """Comments on tasks that mention people or groups, each told once
    (task_comment_mentions_idx)."""
    comments = list(
        TaskComment.objects.filter(created_at__gte=now - MENTION_WINDOW)
        .exclude(mentions=NO_MENTIONS)
        .select_related("author", "task")
        .order_by("created_at")[:FIND_LIMIT]
    )
    for comment in comments:
        mentions = comment.mentions or {}
        yield Event(
            Kind.MENTIONED,
            f"task_mentioned:{comment.pk}",
            comment.task.run_id,
            None,
            groups=tuple(str(g) for g in mentions.get("groups", [])),
            people=tuple(int(u) for u in mentions.get("users", [])),
            task_comment=comment,
        )


def _task_readers(events: list[Event], members: dict[str, list[int]]) -> set[tuple[int, int]]:
    """(person, task) for each person a mention on a task's thread would tell who may read
    the task, by the task page's own check (automation.effects.task_work.may_read_task)."""
    offered: dict[int, set[int]] = defaultdict(set)
    tasks = {}
    for event in events:
        if event.task_comment is not None:
            task = event.task_comment.task
            tasks[task.pk] = task
            offered[task.pk] |= {
                *event.people,
                *(u for g in event.groups for u in members.get(g, ())),
            }
    people = User.objects.in_bulk({uid for ids in offered.values() for uid in ids})
    return {
        (uid, task_id)
        for task_id, ids in offered.items()
        for uid in ids
        if uid in people and may_read_task(people[uid], tasks[task_id])
    }


def _delegated(now: datetime) -> Iterable[Event]:
    """Delegations given lately that are not over: each delegate told once."""
    given = list(
        delegations()
        .filter(created_at__gte=now - HANDOFF_WINDOW, ends_at__gt=now, ended_early_at__isnull=True)
        .select_related("delegator")
        .order_by("created_at")[:FIND_LIMIT]
    )
    keys = {f"delegated:{d.pk}:{d.delegate_id}": d for d in given}
    told = set(Notification.objects.filter(key__in=keys).values_list("key", flat=True))
    for key, delegation in keys.items():
        if key not in told:
            yield Event(
                Kind.DELEGATED,
                f"delegated:{delegation.pk}",
                None,
                None,
                owner_id=delegation.delegate_id,
                delegation=delegation,
            )


def _readers(events: list[Event], members: dict[str, list[int]]) -> set[tuple[int, int]]:
    """(person, run) for each person a mention would tell who may read the run, by the run
    page's own check (automation.runs.comments.may_read_run). Those already told are not
    asked again: the comments of the last two days are looked at every minute."""
    offered: dict[str, tuple[int, int]] = {}
    for event in events:
        if event.comment is not None and event.run_id is not None:
            named = {*event.people, *(uid for g in event.groups for uid in members.get(g, ()))}
            offered |= {f"{event.key}:{uid}": (event.run_id, uid) for uid in named}
    told = set(Notification.objects.filter(key__in=offered).values_list("key", flat=True))
    wanted: dict[int, set[int]] = defaultdict(set)
    for key, (run_id, uid) in offered.items():
        if key not in told:
            wanted[run_id].add(uid)
    people = User.objects.in_bulk({uid for ids in wanted.values() for uid in ids})
    return {
        (uid, run_id)
        for run_id, ids in wanted.items()
        for uid in ids
        if uid in people and may_read_run(people[uid], run_id)
    }


def _members(groups: set[str]) -> dict[str, list[int]]:
    """The active members of each group, by name (one query)."""
    found: dict[str, list[int]] = defaultdict(list)
    through = User.groups.through.objects.filter(
        group__name__in=groups, user__is_active=True
    ).values_list("group__name", "user_id")
    for name, user_id in through.order_by("user_id"):
        found[name].append(user_id)
    return found


def _modes(users: set[int]) -> dict[tuple[int, str], str]:
    rows = Preference.objects.filter(user_id__in=users).values_list("user_id", "kind", "mode")
    return {(user_id, kind): mode for user_id, kind, mode in rows}


def _runs(run_ids: set[int]) -> dict[int, dict[str, Any]]:
    rows = Run.objects.filter(pk__in=run_ids).values(
        "pk", "event_id", "category", "effect_name", "outcome", "queue"
    )
    return {row["pk"]: row for row in rows}


# --- the message -----------------------------------------------------------------------------


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M %Z") if moment else "no time set"


def notification_text(
    event: Event, group: str, run: dict[str, Any] | None, *, personal: bool = True
) -> tuple[str, str]:
    """The subject and text, from the event's templates in the console's words: what is
    asked, of whom, by when, and where to look."""
    name, context = _context(event, group, run or {}, personal=personal)
    text = render(
        f"notifications/{name}",
        {**context, "personal": personal, "preferences": base_url() + reverse("me:notifications")},
    )
    return text.subject, text.body


def _context(
    event: Event, group: str, run: dict[str, Any], *, personal: bool
) -> tuple[str, dict[str, Any]]:
    """Which templates tell of the event, and what they say: every code in words."""
    if event.delegation is not None:
        return "delegated", _delegated_context(event.delegation)
    what = f"run {event.run_id}" + (f" ({run['event_id']})" if run.get("event_id") else "")
    whom = f"the {group_term(group).label} group" if group else "you"
    if event.task_comment is not None:
        noted = event.task_comment
        link = base_url() + reverse("tasks:task", args=[noted.task_id]) + f"#comment-{noted.pk}"
        task = noted.task.subject or business_term("effects", noted.task.effect).label
        return "task_mentioned", {
            **_comment_context(noted.author, noted.body, whom, link),
            "task_id": noted.task_id,
            "task": task,
        }
    if event.comment is not None:
        comment = event.comment
        link = base_url() + reverse("runs:run", args=[event.run_id]) + f"#comment-{comment.pk}"
        return "mentioned", {
            **_comment_context(comment.author, comment.body, whom, link),
            "what": what,
            "run_id": event.run_id,
        }
    if event.approval is not None:
        return str(event.kind), _request_context(
            event.approval, event, group, what, personal=personal
        )
    return "held", _held_context(event, run)


def _delegated_context(away: Delegation) -> dict[str, Any]:
    return {
        "name": away.delegator.get_username(),
        "starts": _when(away.starts_at),
        "ends": _when(away.ends_at),
        "reason": away.reason,
        "link": base_url() + reverse("me:work"),
    }


def _comment_context(author: User | None, body: str, whom: str, link: str) -> dict[str, Any]:
    return {
        "author": author.get_username() if author is not None else "Someone",
        "whom": whom,
        "quoted": body.splitlines()[:20],
        "link": link,
    }


def _request_context(
    request: ApprovalRequest, event: Event, group: str, what: str, *, personal: bool
) -> dict[str, Any]:
    shown = group_term(group).label if group else ""
    who = "you"
    if group:
        who = shown + (" (you are a member)" if personal else "")
    by = (
        f"before {_when(request.escalate_at)}, when it escalates"
        if request.escalated_at is None and request.escalate_to
        else f"before {_when(request.expires_at)}"
    )
    return {
        "group": shown,
        "effect": business_term("effects", request.effect).label,
        "what": what,
        "who": who,
        "by": by,
        "expires": _when(request.expires_at),
        "run_id": event.run_id,
        "link": base_url() + reverse("approvals:evidence", args=[request.pk]),
    }


def _held_context(event: Event, run: dict[str, Any]) -> dict[str, Any]:
    reason = outcome_term(str(run.get("outcome") or ""))
    queue = str(run.get("queue") or run.get("outcome") or "")
    return {
        "run_id": event.run_id,
        "reason": reason.label if run.get("outcome") else "Needs a person",
        "reason_explained": reason.explanation or "A person looks at it before it goes on.",
        "request_type": business_term("request_types", str(run.get("category") or "")).label
        if run.get("category")
        else "not read yet",
        "effect": business_term("effects", str(run["effect_name"])).label
        if run.get("effect_name")
        else "",
        "queue": outcome_term(queue).label if queue else "none",
        "link": base_url() + reverse("runs:run", args=[event.run_id]),
    }


# --- sending ---------------------------------------------------------------------------------


def notifications_send(*, now: datetime, limit: int = SEND_LIMIT) -> dict[str, int]:
    """Send the rows that are due, each in a transaction of its own holding its row lock."""
    done = {"sent": 0, "failed": 0, "retry": 0}
    for _ in range(limit):
        result = _send_next(now)
        if result is None:
            break
        done[result] += 1
    return done


@transaction.atomic(durable=True)
def _send_next(now: datetime) -> str | None:
    row = (
        Notification.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("user")
        .filter(status=Status.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "pk")
        .first()
    )
    if row is None:
        return None
    row.attempts += 1
    if row.channel == Channel.EMAIL:
        address = row.user.email if row.user is not None else ""
        if not address:
            return _give_up(row, "the person has no e-mail address")
        try:
            _mail(address, row.subject, row.body)
        # Whatever one row raises is that row's failure: a malformed address (ValueError,
        # HeaderParseError) caught only as SMTP errors were left the row first in the queue,
        # failing every minute, and no later row was ever sent.
        except Exception as exc:
            return _failed(row, _reason(exc), now)
    else:
        chat = webhooks().get(row.group)
        if chat is None:
            return _give_up(row, f"no chat is set up for {row.group} any more")
        problem = _post(chat, row)
        if problem:
            return _failed(row, problem, now)
    row.send(now=now)
    row.save(update_fields=["status", "sent_at", "last_error", "attempts"])
    logger.info("told %s of %s (run %s)", row.user or row.group, row.kind, row.run_id)
    return "sent"


def _post(chat: tuple[Channel, str], row: Notification) -> str:
    """Post to a chat's incoming webhook in its own shape; what went wrong, or ''."""
    shape, url = chat
    if shape == Channel.SLACK:
        payload: dict[str, Any] = {"text": f"*{row.subject}*\n{row.body}"}
    else:  # a Teams connector's MessageCard
        payload = {
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            "summary": row.subject,
            "title": row.subject,
            "text": row.body.replace("\n", "  \n"),
        }
    try:
        answer = send_request("POST", url, json=payload, timeout=WEBHOOK_TIMEOUT)
    except Exception as exc:  # any (httpx.InvalidURL is no HTTPError): this row's failure
        return _reason(exc)
    if answer.is_success:
        return ""
    return f"HTTP {answer.status_code} {answer.text[:200]}"


def _mail(address: str, subject: str, body: str) -> None:
    """Send a row's message, written when it was found (core.mail: the settings' backend)."""
    send(message(Text(subject, body), to=[address], headers={"Auto-Submitted": "auto-generated"}))


def _reason(exc: Exception) -> str:
    """What went wrong, as the run page shows it: one line, no NUL (PostgreSQL refuses one in
    a text column, which would fail the row's own record of its failure)."""
    return one_line(f"{type(exc).__name__}: {exc}")


def _failed(row: Notification, error: str, now: datetime) -> str:
    if row.attempts >= MAX_ATTEMPTS:
        return _give_up(row, error)
    wait = backoff_delay(row.attempts - 1, base=BACKOFF_BASE_SECONDS, cap=BACKOFF_CAP_SECONDS)
    row.next_attempt_at = now + timedelta(seconds=wait)
    row.last_error = one_line(error)[:1000]
    row.save(update_fields=["next_attempt_at", "last_error", "attempts"])
    logger.warning("could not tell %s of %s: %s", row.user, row.kind, error)
    return "retry"


def _give_up(row: Notification, error: str) -> str:
    row.give_up(error=one_line(error)[:1000])
    row.save(update_fields=["status", "last_error", "attempts"])
    logger.warning("gave up telling %s of %s: %s", row.user, row.kind, error)
    return "failed"


# --- the digest ------------------------------------------------------------------------------


def notifications_digest(*, now: datetime) -> int:
    """Send each person who asked for a digest one message with what waited for them since
    their last one; the number of messages sent."""
    people = (
        Notification.objects.filter(status=Status.DIGEST)
        .values_list("user_id", flat=True)
        .distinct()
    )
    sent = 0
    for user_id in list(people):
        sent += _digest_for(user_id, now)
    return sent


@transaction.atomic(durable=True)
def _digest_for(user_id: int, now: datetime) -> int:
    rows = list(
        Notification.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("user")
        .filter(user_id=user_id, status=Status.DIGEST)
        .order_by("created_at", "pk")
    )
    person = rows[0].user if rows else None
    if person is None or not person.email:
        return 0
    try:
        send_templated(
            "notifications/digest",
            digest_context(rows),
            to=[person.email],
            headers={"Auto-Submitted": "auto-generated"},
        )
    except Exception as exc:  # one person's digest (a malformed address) stops nobody else's
        logger.warning("the digest for %s was not sent: %s", person.pk, _reason(exc))
        return 0
    for row in rows:  # each moves by its transition; locked above, saved in one statement
        row.send_in_digest(now=now)
    Notification.objects.bulk_update(rows, ["status", "sent_at"])
    return 1


def digest_context(rows: list[Notification]) -> dict[str, Any]:
    """What the digest says: the first DIGEST_ITEMS things, then how many more and where the
    console lists them, so a morning after a flood is one message of a few pages."""
    items = [
        {
            "subject": row.subject,
            # The lines that say what is asked, of whom and by when (under the headline).
            "lines": [line[:DIGEST_LINE] for line in row.body.splitlines()[2:5]],
        }
        for row in rows[:DIGEST_ITEMS]
    ]
    more = len(rows) - DIGEST_ITEMS
    return {
        "count": len(rows),
        "items": items,
        "more": f"{more:,}" if more > 0 else "",
        "link": base_url() + reverse("me:work"),
    }


# --- what the run page shows -----------------------------------------------------------------


def run_notifications(run_id: int) -> list[Notification]:
    """Who was told of what about this run, and when (one query)."""
    return list(
        Notification.objects.filter(run_id=run_id)
        .select_related("user")
        .order_by("created_at", "pk")[:200]
    )


# --- what a person reads in the console ---------------------------------------------------


def my_notifications(user: User, *, unread_only: bool = False) -> QuerySet[Notification]:
    """The person's own notifications, what each is about joined (notification_user_idx). A
    kind they turned off was never meant for them to hear of: it is left out."""
    rows = (
        Notification.objects.filter(user=user)
        .exclude(status=Status.OFF)
        .select_related("run", "approval", "task")
    )
    return rows.filter(read_at__isnull=True) if unread_only else rows


def unread_count(user: User, *, limit: int) -> int:
    """How many of the person's notifications are unread, counted up to `limit` only: an
    index-only count of notification_unread_idx."""
    unread = Notification.objects.filter(user=user, read_at__isnull=True).exclude(status=Status.OFF)
    return unread.values("pk")[:limit].count()


@transaction.atomic(durable=True)
def notifications_mark_read(*, user: User, notification_id: int | None, now: datetime) -> int:
    """Mark one of the person's notifications read, or all of their unread ones: one
    conditional UPDATE of their own unread rows, so another person's row is never touched and
    one read before keeps the time it was read. The number marked; an audit row if any."""
    rows = Notification.objects.filter(user=user, read_at__isnull=True)
    if notification_id is not None:
        rows = rows.filter(pk=notification_id)
    marked = rows.update(read_at=now)
    if marked:
        audit_record(
            action=AuditAction.NOTIFICATIONS_READ,
            actor=user,
            marked=marked,
            notification=notification_id,
        )
    return marked
