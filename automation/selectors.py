"""Reads behind the API and pages: bounded queries, no N+1."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import BinaryField, Count, Min, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Length, Substr

from approvals.models import ApprovalDecision
from approvals.selectors import RUN_DOCUMENTS, run_list_columns
from automation.api_schemas import RunDetail, RunSummary
from automation.models import (
    Effect,
    EffectAttempt,
    EffectControl,
    EffectStatus,
    IntakeChannel,
    IntakeRecord,
    RecoveryAction,
    Run,
    State,
)
from automation.schemas import EffectName, is_mail
from core.keyset import NEWEST, OLDEST, Cursor, Page, keyset_page
from core.round_trip import read_lists

# What an integrator's token may read: the runs taken in through its own channel, and no
# other. E-mail identity is wider than that on purpose (one Message-ID, one request, on every
# path), so a message the mailbox already took in is answered to the API as a duplicate that
# names the existing run: its id, state and outcome, enough to know the request is in hand.
# Its detail (what was read from the message, the rules, the failure, the versions) stays
# with the channel that took it in: a Message-ID is no secret (every recipient of a thread
# knows it), and neither it nor a copy of the message makes a token a reader of what another
# path received.


def run_for_channel(*, run_id: int, channel: IntakeChannel) -> Run | None:
    return Run.objects.filter(pk=run_id, channel=channel).first()


def channel_may_read(*, run: Run, channel: IntakeChannel) -> bool:
    """The rule of run_for_channel, for a run already in hand."""
    return run.channel_id == channel.pk


def run_summary(run: Run, *, run_page: str, readable: bool = True) -> RunSummary:
    """What the API says of a run; the addresses of its detail and of its page in the console
    only to those who may read it."""
    summary: RunSummary = {
        "id": run.pk,
        "event_id": run.event_id,
        "state": run.state,
        "outcome": run.outcome or None,
    }
    if readable:
        summary["url"] = f"/api/v1/runs/{run.pk}"
        summary["links"] = {"run_page": run_page}
    return summary


def run_detail(run: Run, *, run_page: str) -> RunDetail:
    stages = run.stages.order_by("started_at", "pk")
    return {
        **run_summary(run, run_page=run_page),
        "failure": {"field": run.failure_field, "detail": run.failure_detail}
        if run.failure_field or run.failure_detail
        else None,
        "fingerprint": run.fingerprint,
        "versions": {
            "workflow": run.workflow_version,
            "classifier": run.classifier_version,
            "prompt": run.prompt_version,
            "policy": run.policy_version or None,
        },
        "classification": run.classification,
        "route": run.route or None,
        "effect": run.effect_name or None,
        "rules": run.rules,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "stages": [
            {
                "stage": stage.stage,
                "attempt": stage.attempt,
                "started_at": stage.started_at.isoformat(),
                "duration_ms": stage.duration_ms,
                "outcome": stage.outcome,
                "error_class": stage.error_class,
            }
            for stage in stages
        ],
        "checkpoints": run.checkpoints.count(),
    }


# --- exception queues and the run page ---------------------------------------------------

QUEUE_PAGE_SIZE = 100
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
        "replays": [r for r in lists["related"] if r.replay_of_id == run.pk],
        "thread_replies": [r for r in lists["related"] if r.thread_parent_id == run.pk],
        "mail": run.normalized if is_mail(run.normalized) else None,
        "total_ms": sum(stage.duration_ms for stage in stages),
    }


def _people_of(run: Run) -> QuerySet[Any]:
    """Who decided on the run's approvals or recovered it: the names its page shows."""
    deciders = ApprovalDecision.objects.filter(request__run=run).values("user_id")
    recoverers = RecoveryAction.objects.filter(run=run).values("actor_id")
    return get_user_model().objects.filter(Q(pk__in=deciders) | Q(pk__in=recoverers))


@dataclass(frozen=True)
class EffectState:
    name: str
    paused: bool
    rate_per_minute: int | None
    waiting: int
    held: int


def effect_controls() -> list[EffectState]:
    """Each effect with deliveries in the outbox or a control: paused or not, and its backlog."""
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
    names = sorted(set(counts) | set(controls) | {e.value for e in EffectName})
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


def current_reading(run: Run) -> dict[str, Any]:
    """The interpretation a person corrects: the accepted one, else what the classifier last
    answered (an unusable reading), else nothing."""
    if run.classification:
        return run.classification
    attempt = run.classifications.order_by("-attempt").first()
    raw = attempt.raw_output if attempt else None
    return raw if isinstance(raw, dict) else {}


# --- the raw input ------------------------------------------------------------------------

RAW_PREVIEW_BYTES = 64 * 1024


@dataclass(frozen=True)
class RawPreview:
    """The first bytes of an intake record, read without loading the rest, and what they
    are part of: `stored` bytes kept of a request of `size` bytes (fewer when refused)."""

    intake: IntakeRecord  # without `raw`
    head: bytes
    stored: int

    @property
    def text(self) -> str:
        return self.head.decode("utf-8", errors="replace")

    @property
    def cut(self) -> bool:
        return len(self.head) < self.stored


def raw_preview(*, intake_id: int) -> RawPreview:
    """The first RAW_PREVIEW_BYTES of a record's stored bytes: a page shows those, however
    large the request (a download serves the rest)."""
    record = (
        IntakeRecord.objects.defer("raw")
        .annotate(
            head=Substr("raw", 1, RAW_PREVIEW_BYTES, output_field=BinaryField()),
            stored=Length("raw"),
        )
        .get(pk=intake_id)
    )
    return RawPreview(record, bytes(record.head), record.stored)
