"""Reads behind the exception queues and the run page: bounded queries, no N+1.

The run page reads every concern's rows of one run, which is why it sits with recovery, the
concern on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import BigIntegerField, Count, F, Func, Min, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast

from approvals.models import ApprovalDecision
from approvals.selectors import RUN_DOCUMENTS, run_list_columns
from automation.effects.models import EffectAttempt
from automation.recovery.models import RecoveryAction
from automation.runs.models import Run, RunComment, State
from automation.runs.selectors import shown
from automation.schemas import is_mail
from core.keyset import NEWEST, OLDEST, Cursor, Page, keyset_page
from core.round_trip import read_lists

# Every list of the console shows fifty rows a page (the inbox, the admin, the QA queue).
QUEUE_PAGE_SIZE = 50
# How long a held run may wait in its queue before it is overdue: a day, the time policy gives
# an approval before it escalates by default (ApprovalRule.escalate_after_hours). Counted from
# queued_at, so claiming a run does not reset it.
QUEUE_SLA = timedelta(hours=24)
# The amount the reading extracted (classification.fields.amount.value), as stored.
_AMOUNT = KeyTextTransform(
    "value", KeyTransform("amount", KeyTransform("fields", "classification"))
)


@dataclass(frozen=True)
class QueueSummary:
    name: str
    count: int
    oldest: datetime
    claimed: int
    owner_group: str


def queue_summaries(*, owners: dict[str, str]) -> list[QueueSummary]:
    """Every non-empty exception queue: one grouped query."""
    # Every column read here is in run_held_queue_idx (queue, queued_at, owner): the held
    # runs are counted from that index, never by reading the runs table.
    rows = (
        Run.objects.exclude(queue="")
        .values("queue")
        .annotate(count=Count("*"), oldest=Min("queued_at"), claimed=Count("owner"))
        .order_by("-count", "queue")
    )
    return [
        QueueSummary(
            name=row["queue"],
            count=row["count"],
            oldest=row["oldest"],
            claimed=row["claimed"],
            owner_group=owners.get(row["queue"], owners.get(State.NEEDS_REVIEW, "")),
        )
        for row in rows
    ]


@dataclass(frozen=True)
class QueueFilters:
    route: str = ""
    owner: str = ""  # a username, "none" for unclaimed, "" for anyone
    older_than_hours: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str = ""
    after: Cursor | None = None  # the page after this position in the queue
    before: Cursor | None = None  # the page before it
    order: str = OLDEST  # or NEWEST: held longest first, or most recently held first


def identifier_match(term: str) -> Q:
    """Runs a person names by an identifier: event id (a mail's Message-ID), fingerprint or
    customer reference. Exact matches only, each on an indexed column (run_event_id_idx,
    run_fingerprint_idx, run_customer_ref_idx), so a search reads what it finds."""
    term = term.strip()
    match = Q(event_id=term) | Q(fingerprint=term) | Q(enrichment__customer__reference=term)
    if term.startswith("<") and term.endswith(">"):  # a Message-ID as a header writes it;
        match |= Q(event_id=term[1:-1])  # the run keeps it without the brackets
    return match


def queue_items(*, queue: str, filters: QueueFilters, now: datetime) -> Page[Run]:
    """A page of a queue's runs, oldest first (or newest first); one query with owner and
    channel joined. Each run carries what its row shows of its documents as annotations
    (list_subject, list_sender, list_sender_name, list_customer, list_amount); the documents
    themselves are not loaded.

    Keyset pages over run_held_queue_idx (queue, queued_at, id), read backwards for newest
    first: the thousandth page costs what the first does."""
    runs = (
        Run.objects.filter(queue=queue)
        .exclude(queue="")
        .select_related("owner", "channel")
        .defer(*RUN_DOCUMENTS)
        .annotate(**run_list_columns(), list_amount=_AMOUNT)
    )
    if filters.route:
        runs = runs.filter(route=filters.route)
    if filters.owner == "none":
        runs = runs.filter(owner__isnull=True)
    elif filters.owner:
        runs = runs.filter(owner__username=filters.owner)
    if filters.older_than_hours is not None:
        runs = runs.filter(queued_at__lte=now - timedelta(hours=filters.older_than_hours))
    if filters.since is not None:
        runs = runs.filter(queued_at__gte=filters.since)
    if filters.until is not None:
        runs = runs.filter(queued_at__lte=filters.until)
    if filters.search.strip():
        runs = runs.filter(identifier_match(filters.search))
    return keyset_page(
        runs,
        time_field="queued_at",
        size=QUEUE_PAGE_SIZE,
        after=filters.after,
        before=filters.before,
        descending=filters.order == NEWEST,
    )


def team_queue_items(
    *, routes: list[str], after: Cursor | None, before: Cursor | None, order: str
) -> Page[Run]:
    """A page of the held runs of these routes, whatever their queue: a team's own queue.
    The held runs are few beside all runs; they are read by run_held_queue_idx (queue <> '')
    and the route is checked on those rows."""
    runs = (
        Run.objects.exclude(queue="")
        .filter(route__in=routes)
        .select_related("owner", "channel")
        .defer(*RUN_DOCUMENTS)
        .annotate(**run_list_columns(), list_amount=_AMOUNT)
    )
    return keyset_page(
        runs,
        time_field="queued_at",
        size=QUEUE_PAGE_SIZE,
        after=after,
        before=before,
        descending=order == NEWEST,
    )


def queue_due_at(run: Run) -> datetime | None:
    """When a held run is due to be worked: QUEUE_SLA after it was queued."""
    return run.queued_at + QUEUE_SLA if run.queued_at else None


def run_page(run: Run) -> dict[str, Any]:
    """Everything that answers how this run's decision was reached, read in one round trip
    (core.round_trip) whatever the run's age or the number of its rows: each list is read
    by its run_id index."""
    lists = read_lists(
        {
            "stages": run.stages.all(),
            "checkpoints": run.checkpoints.all(),
            "classifications": run.classifications.all(),
            "approvals": run.approvals.all(),
            "decisions": ApprovalDecision.objects.filter(request__run=run),
            "effects": run.effects.order_by("pk"),
            "attempts": EffectAttempt.objects.filter(effect__run=run),
            "recovery": run.recovery_actions.all(),
            "history": run.audit_events.all(),
            "comments": run.comments.all(),
            "related": Run.objects.filter(Q(replay_of=run) | Q(thread_parent=run)).order_by(
                "created_at", "pk"
            ),
            "people": _people_of(run),
        }
    )
    people = {person.pk: person for person in lists["people"]}
    for decision in lists["decisions"]:
        decision.user = people[decision.user_id]
    for action in lists["recovery"]:
        action.actor = people[action.actor_id]
    for comment in lists["comments"]:
        comment.author = people[comment.author_id]
    for approval in lists["approvals"]:
        approval.decision_rows = [d for d in lists["decisions"] if d.request_id == approval.pk]
    for effect in lists["effects"]:
        effect.attempt_list = [a for a in lists["attempts"] if a.effect_id == effect.pk]
    stages = lists["stages"]
    return {
        "intake": run.intake,
        "stages": stages,
        "checkpoints": lists["checkpoints"],
        "classifications": lists["classifications"],
        "approvals": lists["approvals"],
        "effects": lists["effects"],
        "recovery": lists["recovery"],
        "history": lists["history"],
        "comments": shown(lists["comments"], {pk: p.get_username() for pk, p in people.items()}),
        "replays": [r for r in lists["related"] if r.replay_of_id == run.pk],
        "thread_replies": [r for r in lists["related"] if r.thread_parent_id == run.pk],
        "mail": run.normalized if is_mail(run.normalized) else None,
        "total_ms": sum(stage.duration_ms for stage in stages),
    }


def _people_of(run: Run) -> QuerySet[Any]:
    """Who decided on the run's approvals, recovered it, commented on it or was mentioned in
    a comment: the names its page shows."""
    deciders = ApprovalDecision.objects.filter(request__run=run).values("user_id")
    recoverers = RecoveryAction.objects.filter(run=run).values("actor_id")
    comments = RunComment.objects.filter(run=run)
    # Each id of a comment's mentions.users, one row per id (a set-returning function).
    mentioned = comments.annotate(
        person=Cast(
            Func(F("mentions__users"), function="jsonb_array_elements_text"), BigIntegerField()
        )
    ).values("person")
    return get_user_model().objects.filter(
        Q(pk__in=deciders)
        | Q(pk__in=recoverers)
        | Q(pk__in=comments.values("author_id"))
        | Q(pk__in=mentioned)
    )


def current_reading(run: Run) -> dict[str, Any]:
    """The interpretation a person corrects: the accepted one, else what the classifier last
    answered (an unusable reading), else nothing."""
    if run.classification:
        return run.classification
    attempt = run.classifications.order_by("-attempt").first()
    raw = attempt.raw_output if attempt else None
    return raw if isinstance(raw, dict) else {}


def claimed_runs(user: Any) -> QuerySet[Run]:
    """The held runs this person claimed from a queue (run_owner_idx), for their own list."""
    return Run.objects.filter(owner=user).exclude(queue="").select_related("channel")
