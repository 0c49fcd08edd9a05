"""Reads behind the exception queues and the run page: bounded queries, no N+1.

The run page reads every concern's rows of one run, which is why it sits with recovery, the
concern on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, Min, Prefetch, Q, QuerySet, prefetch_related_objects
from django.db.models.fields.json import KeyTextTransform, KeyTransform

from approvals.models import ApprovalDecision
from approvals.selectors import RUN_DOCUMENTS, run_list_columns
from automation.effects.models import Effect
from automation.recovery.models import RecoveryAction
from automation.runs.models import Run, RunComment, State
from automation.runs.selectors import shown
from automation.schemas import is_mail
from core.keyset import NEWEST, OLDEST, Cursor, Page, keyset_page

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
    """Everything that answers how this run's decision was reached: one query per list (a
    list with nothing to hang from, such as attempts without effects, costs none), each read
    by its run_id index, so the count stays the same whatever the run's age or the number of
    its rows. The lists hang from the run in hand (prefetch_related_objects), each under
    its own name."""
    prefetch_related_objects(
        [run],
        Prefetch("stages", to_attr="page_stages"),
        Prefetch("checkpoints", to_attr="page_checkpoints"),
        Prefetch("classifications", to_attr="page_classifications"),
        Prefetch("approvals", to_attr="page_approvals"),
        Prefetch(
            "page_approvals__decisions",
            queryset=ApprovalDecision.objects.select_related("user"),
            to_attr="decision_rows",
        ),
        Prefetch("effects", queryset=Effect.objects.order_by("pk"), to_attr="page_effects"),
        Prefetch("page_effects__attempt_rows", to_attr="attempt_list"),
        Prefetch(
            "recovery_actions",
            queryset=RecoveryAction.objects.select_related("actor"),
            to_attr="page_recovery",
        ),
        Prefetch("audit_events", to_attr="page_history"),
        Prefetch(
            "comments",
            queryset=RunComment.objects.select_related("author"),
            to_attr="page_comments",
        ),
    )
    # Its replays and the replies to it, in one query (each through its own index).
    related = list(
        Run.objects.filter(Q(replay_of=run) | Q(thread_parent=run)).order_by("created_at", "pk")
    )
    stages = run.page_stages  # type: ignore[attr-defined]
    comments = run.page_comments  # type: ignore[attr-defined]
    return {
        "intake": run.intake,
        "stages": stages,
        "checkpoints": run.page_checkpoints,  # type: ignore[attr-defined]
        "classifications": run.page_classifications,  # type: ignore[attr-defined]
        "approvals": run.page_approvals,  # type: ignore[attr-defined]
        "effects": run.page_effects,  # type: ignore[attr-defined]
        "recovery": run.page_recovery,  # type: ignore[attr-defined]
        "history": run.page_history,  # type: ignore[attr-defined]
        "comments": shown(comments, _usernames(comments)),
        "replays": [r for r in related if r.replay_of_id == run.pk],
        "thread_replies": [r for r in related if r.thread_parent_id == run.pk],
        "mail": run.normalized if is_mail(run.normalized) else None,
        "total_ms": sum(stage.duration_ms for stage in stages),
    }


def _usernames(comments: list[RunComment]) -> dict[int, str]:
    """The names of the comments' authors (read with them) and of the people they mention:
    one query more only when a comment mentions someone who wrote none of them."""
    names = {c.author_id: c.author.get_username() for c in comments}
    mentioned = {pk for c in comments for pk in c.mentions.get("users", [])} - names.keys()
    if mentioned:
        people = get_user_model().objects.filter(pk__in=mentioned)
        names.update((person.pk, person.get_username()) for person in people)
    return names


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
