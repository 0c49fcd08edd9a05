"""Reads behind the API and pages: bounded queries, no N+1."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q

from automation.models import Effect, EffectControl, IntakeChannel, Run
from automation.schemas import EffectName, is_mail

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


def run_summary(run: Run, *, readable: bool = True) -> dict[str, Any]:
    """What the API says of a run; the address of its detail only to those who may read it."""
    summary: dict[str, Any] = {
        "id": run.pk,
        "event_id": run.event_id,
        "state": run.state,
        "outcome": run.outcome or None,
    }
    if readable:
        summary["url"] = f"/api/v1/runs/{run.pk}"
    return summary


def run_detail(run: Run) -> dict[str, Any]:
    stages = run.stages.order_by("started_at", "pk").values(
        "stage", "attempt", "started_at", "duration_ms", "outcome", "error_class"
    )
    return {
        **run_summary(run),
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
        "stages": [{**stage, "started_at": stage["started_at"].isoformat()} for stage in stages],
        "checkpoints": run.checkpoints.count(),
    }


# --- exception queues and the run page ---------------------------------------------------

QUEUE_PAGE_SIZE = 100


@dataclass(frozen=True)
class QueueSummary:
    name: str
    count: int
    oldest: datetime
    claimed: int
    owner_group: str


def queue_summaries(*, owners: dict[str, str]) -> list[QueueSummary]:
    """Every non-empty exception queue: one grouped query."""
    rows = (
        Run.objects.exclude(queue="")
        .values("queue")
        .annotate(count=Count("pk"), oldest=Min("queued_at"), claimed=Count("owner"))
        .order_by("-count", "queue")
    )
    return [
        QueueSummary(
            name=row["queue"],
            count=row["count"],
            oldest=row["oldest"],
            claimed=row["claimed"],
            owner_group=owners.get(row["queue"], owners.get("needs_review", "")),
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


def queue_items(*, queue: str, filters: QueueFilters, now: datetime) -> list[Run]:
    """A queue's runs, oldest first, bounded; one query with owner and channel joined."""
    runs = Run.objects.filter(queue=queue).select_related("owner", "channel")
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
    if filters.search:
        runs = runs.filter(event_id=filters.search.strip())
    return list(runs.order_by("queued_at", "pk")[:QUEUE_PAGE_SIZE])


def run_page(run: Run) -> dict[str, Any]:
    """Everything that answers how this run's decision was reached: a bounded set of queries."""
    effects = list(run.effects.prefetch_related("attempt_rows"))
    stages = list(run.stages.all())
    return {
        "intake": run.intake,
        "stages": stages,
        "checkpoints": list(run.checkpoints.all()),
        "classifications": list(run.classifications.all()),
        "approvals": list(run.approvals.prefetch_related("decisions__user")),
        "effects": effects,
        "recovery": list(run.recovery_actions.select_related("actor", "batch")),
        "history": list(run.audit_events.select_related("actor")),
        "replays": list(run.replays.only("pk", "state", "outcome", "created_at")),
        "thread_replies": list(
            run.thread_replies.only("pk", "state", "event_id", "normalized", "created_at")
        ),
        "mail": run.normalized if is_mail(run.normalized) else None,
        "total_ms": sum(stage.duration_ms for stage in stages),
    }


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
        for row in Effect.objects.filter(status__in=["pending", "retry_wait"])
        .values("name")
        .annotate(
            waiting=Count("pk", filter=Q(next_attempt_at__isnull=False) | Q(attempts=0)),
            held=Count("pk", filter=Q(next_attempt_at__isnull=True, attempts__gt=0)),
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
