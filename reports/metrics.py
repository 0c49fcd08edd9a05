"""Prometheus metrics, read from the rollups and the open runs at scrape time, and their endpoint.

Nothing is counted in process memory: web processes and workers come and go, the database
is the truth. A scrape runs a fixed handful of grouped queries, whatever the number of runs.
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime

from django.db.models import CharField, Count, F, IntegerField, Min, Q, Value
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from approvals.models import ApprovalRequest, ApprovalStatus
from automation.classifiers.servers import Waiting, server_views
from automation.conf import setting
from automation.intake.selectors import mailbox_views
from automation.models import (
    DeliveryResult,
    Effect,
    EffectControl,
    EffectStatus,
    Outcome,
    Run,
    State,
)
from reports import rollups
from reports.models import RollupMark

# The exception queues a run can be held or failed into (the queue is named by the outcome),
# exported at zero when empty so that a graph or an alert never meets a missing series.
EXCEPTION_QUEUES = (
    Outcome.CLASSIFICATION_INVALID,
    Outcome.EXTRACTION_INVALID,
    Outcome.LOW_CONFIDENCE,
    Outcome.RISK_SIGNAL,
    Outcome.RETRY_EXHAUSTED,
    Outcome.APPROVAL_EXPIRED,
    Outcome.EFFECT_UNAVAILABLE,
    Outcome.EFFECT_UNCERTAIN,
    Outcome.EFFECT_REJECTED,
)
# Every EffectAttempt.outcome, exported at zero until it happens.
DELIVERY_RESULTS = tuple(DeliveryResult)
# Outbox rows not yet delivered, by effect and status: an index-only scan of effect_due_idx.
OUTBOX_STATUSES = (EffectStatus.PENDING, EffectStatus.RETRY_WAIT)


class GatehouseCollector(Collector):
    """Runs, queues, approvals and effect deliveries, as they stand in the database now."""

    def describe(self) -> Iterable[Metric]:
        # Registration must not query the database (it happens at import time).
        return []

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        mark = rollups.current_mark()
        yield from run_metrics(now, mark)
        yield from approval_metrics(now)
        yield from effect_metrics(mark)
        yield from model_server_metrics(now)
        yield from mailbox_metrics(now)


def _age(now: datetime, since: datetime | None) -> float:
    return max((now - since).total_seconds(), 0.0) if since is not None else 0.0


def run_metrics(now: datetime, mark: RollupMark | None) -> Iterator[Metric]:
    """Runs by state and outcome from the rollups; queues and holds from open runs only."""
    runs = GaugeMetricFamily(
        "gatehouse_runs",
        "Runs by state and outcome (outcome 'none' while a run has none).",
        labels=["state", "outcome"],
    )
    by_state: dict[tuple[str, str], int] = defaultdict(int)
    spent = rollups.Total()
    for (state, outcome), total in rollups.totals(mark).items():
        by_state[(state, outcome or "none")] += total.runs
        spent += total
    for (state, outcome), count in sorted(by_state.items()):
        runs.add_metric([state, outcome], count)
    yield runs
    tokens = CounterMetricFamily(
        "gatehouse_model_tokens",
        "Tokens the model server reported for the runs' classifier calls, by kind.",
        labels=["kind"],
    )
    tokens.add_metric(["prompt"], spent.prompt_tokens)
    tokens.add_metric(["completion"], spent.completion_tokens)
    yield tokens
    yield CounterMetricFamily(
        "gatehouse_model_cost",
        "What the runs' classifier calls cost, by the price table (GATEHOUSE_OPENAI_PRICES).",
        value=float(spent.cost),
    )
    # Only runs in an exception queue, the same filter as the queues page, which a partial
    # index on queue (WHERE queue <> '') serves without reading the finished history. A held
    # run (needs_review) always sits in the queue its outcome names.
    queued = (
        Run.objects.exclude(queue="")
        .values("queue")
        .annotate(
            count=Count("pk"),
            oldest=Min("queued_at"),
            oldest_held=Min("queued_at", filter=Q(state=State.NEEDS_REVIEW)),
        )
        .order_by()
    )
    depth: dict[str, int] = dict.fromkeys(EXCEPTION_QUEUES, 0)
    oldest_queued: dict[str, datetime] = {}
    held: list[datetime] = []
    for row in queued:
        depth[row["queue"]] = row["count"]
        if row["oldest"] is not None:
            oldest_queued[row["queue"]] = row["oldest"]
        if row["oldest_held"] is not None:
            held.append(row["oldest_held"])
    oldest_held = min(held, default=None)
    yield _queue_depth(depth)
    yield _queue_age(now, depth, oldest_queued)
    yield GaugeMetricFamily(
        "gatehouse_oldest_held_run_age_seconds",
        "Seconds the longest-held run (needs_review) has waited in its queue; 0 if none.",
        value=_age(now, oldest_held),
    )


def _queue_depth(depth: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(
        "gatehouse_queue_depth",
        "Runs held or failed in each exception queue (the ops queues page).",
        labels=["queue"],
    )
    for queue, count in sorted(depth.items()):
        family.add_metric([queue], count)
    return family


def _queue_age(now: datetime, depth: dict[str, int], oldest: dict[str, datetime]) -> Metric:
    family = GaugeMetricFamily(
        "gatehouse_queue_oldest_age_seconds",
        "Seconds the oldest run of each exception queue has waited there; 0 if empty.",
        labels=["queue"],
    )
    for queue in sorted(depth):
        family.add_metric([queue], _age(now, oldest.get(queue)))
    return family


def approval_metrics(now: datetime) -> Iterator[Metric]:
    """One grouped query over pending approvals: an index-only scan of approval_inbox_idx
    (status, group, created_at), so every column read, the count's too, is in the index."""
    rows = (
        ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
        .values("group")
        .annotate(count=Count("*"), oldest=Min("created_at"))
        .order_by("group")
    )
    pending = GaugeMetricFamily(
        "gatehouse_approvals_pending",
        "Approval requests waiting for a decision, by the group they are routed to.",
        labels=["group"],
    )
    oldest: datetime | None = None
    for row in rows:
        pending.add_metric([row["group"]], row["count"])
        oldest = min(oldest or row["oldest"], row["oldest"])
    yield pending
    yield GaugeMetricFamily(
        "gatehouse_oldest_pending_approval_age_seconds",
        "Seconds the oldest pending approval request has waited; 0 if none.",
        value=_age(now, oldest),
    )


def _text(value: str) -> Value:
    return Value(value, output_field=CharField())


def _effect_rows(mark: RollupMark | None) -> list[tuple[str, str, str, int]]:
    """Attempts by result (rolled up), the outbox backlog and paused effects: one UNION ALL
    of (kind, name, status, count)."""
    outbox = (
        Effect.objects.filter(status__in=OUTBOX_STATUSES)
        .annotate(kind=_text("outbox"), a=F("name"), b=F("status"))
        .values_list("kind", "a", "b")
        .annotate(n=Count("*"))
        .order_by()
    )
    paused = (
        EffectControl.objects.annotate(
            kind=_text("paused"), a=F("name"), b=_text(""), n=Cast("paused", IntegerField())
        )
        .values_list("kind", "a", "b", "n")
        .order_by()
    )
    rows = rollups.delivery_rows(mark).union(outbox, paused, all=True)
    return [(kind, a, b, int(n)) for kind, a, b, n in rows]


def effect_metrics(mark: RollupMark | None) -> Iterator[Metric]:
    rows = _effect_rows(mark)
    attempts: dict[str, int] = dict.fromkeys(DELIVERY_RESULTS, 0)
    for _, result, _, count in (r for r in rows if r[0] == "delivery"):
        attempts[result] = attempts.get(result, 0) + count
    deliveries = CounterMetricFamily(
        "gatehouse_effect_deliveries",
        "Effect delivery attempts by result (attempt rows are never deleted).",
        labels=["result"],
    )
    for result, count in sorted(attempts.items()):
        deliveries.add_metric([result], count)
    yield deliveries
    outbox = GaugeMetricFamily(
        "gatehouse_effect_outbox",
        "Effects not yet delivered, by effect and status (pending, retry_wait).",
        labels=["effect", "status"],
    )
    for _, name, status, count in sorted(r for r in rows if r[0] == "outbox"):
        outbox.add_metric([name, status], count)
    yield outbox
    paused = GaugeMetricFamily(
        "gatehouse_effect_paused",
        "1 while an operator has paused an effect's deliveries, else 0.",
        labels=["effect"],
    )
    for _, name, _, is_paused in sorted(r for r in rows if r[0] == "paused"):
        paused.add_metric([name], int(is_paused))
    yield paused


BREAKER_STATES = ("closed", "open", "probing")


def model_server_metrics(now: datetime) -> Iterator[Metric]:
    """Each model server's breaker, pause and day's spend (one small table: a row per server),
    and the runs waiting for one, by what they wait for."""
    views = server_views(now=now)
    breaker = GaugeMetricFamily(
        "gatehouse_model_server_breaker",
        "1 for the state a model server's circuit breaker is in (closed, open, probing).",
        labels=["server", "state"],
    )
    paused = GaugeMetricFamily(
        "gatehouse_model_server_paused_seconds",
        "Seconds left of a pause the model server asked for (a 429's Retry-After); 0 if none.",
        labels=["server"],
    )
    spent = GaugeMetricFamily(
        "gatehouse_model_server_spent_today",
        "What today's calls to the model server cost, by the price table.",
        labels=["server"],
    )
    budget = GaugeMetricFamily(
        "gatehouse_model_server_budget_spent",
        "1 while the model server's daily budget is spent (no call is made), else 0.",
        labels=["server"],
    )
    waiting = GaugeMetricFamily(
        "gatehouse_runs_waiting_for_model_server",
        "Runs waiting to call their model server, by what they wait for.",
        labels=["reason"],
    )
    counts: dict[str, int] = dict.fromkeys(Waiting, 0)
    for row in views:
        view = row.server
        for state in BREAKER_STATES:
            breaker.add_metric([view.key, state], int(view.breaker == state))
        left = (view.paused_until - now).total_seconds() if view.paused_until else 0.0
        paused.add_metric([view.key], max(left, 0.0))
        spent.add_metric([view.key], float(view.spent_today))
        budget.add_metric([view.key], int(view.over_budget))
        counts.update(row.waiting)
    for reason, count in sorted(counts.items()):
        waiting.add_metric([reason], count)
    yield from (breaker, paused, spent, budget, waiting)


def mailbox_metrics(now: datetime) -> Iterator[Metric]:
    """Each mailbox's watcher: alive or not, how long since it was heard from, and the day's
    mail (one query: a row per mailbox)."""
    up = GaugeMetricFamily(
        "gatehouse_mailbox_up",
        "1 while the mailbox's watcher is heard from (mailbox_watch), else 0.",
        labels=["mailbox"],
    )
    contact = GaugeMetricFamily(
        "gatehouse_mailbox_last_contact_seconds",
        "Seconds since the mailbox's watcher last wrote its progress; -1 if it never did.",
        labels=["mailbox"],
    )
    taken = GaugeMetricFamily(
        "gatehouse_mailbox_taken_today",
        "Messages the mailbox's watcher took in today (the local day).",
        labels=["mailbox"],
    )
    refused = GaugeMetricFamily(
        "gatehouse_mailbox_refused_today",
        "Messages the mailbox's watcher refused today (too large, unreadable or invalid).",
        labels=["mailbox"],
    )
    errors = GaugeMetricFamily(
        "gatehouse_mailbox_errors_today",
        "Errors the mailbox's watcher met today (lost connections, messages not stored).",
        labels=["mailbox"],
    )
    for view in mailbox_views(now=now):
        name = [view.channel]
        up.add_metric(name, int(view.alive))
        seen = view.last_contact_at
        contact.add_metric(name, max((now - seen).total_seconds(), 0.0) if seen else -1.0)
        taken.add_metric(name, view.taken_today)
        refused.add_metric(name, view.refused_today)
        errors.add_metric(name, view.errors_today)
    yield from (up, contact, taken, refused, errors)


REGISTRY = CollectorRegistry()
REGISTRY.register(GatehouseCollector())


# --- the endpoint ---------------------------------------------------------------------------


def _token_matches(request: HttpRequest) -> bool:
    expected = setting("METRICS_TOKEN")
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    # Constant time: the comparison must not tell a guesser how much of the token was right.
    return hmac.compare_digest(key.strip().encode(), expected.encode())


def _unauthorized() -> HttpResponse:
    response = HttpResponse(
        "send 'Authorization: Bearer <token>'\n", status=401, content_type="text/plain"
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition: for the scraper's bearer token, or a person with reports."""
    if not _token_matches(request):
        if not request.user.is_authenticated:
            return _unauthorized()
        if not request.user.has_perm("reports.view_reports"):
            return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
