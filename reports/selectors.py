"""Reads behind the reports dashboard: each panel is a few aggregate queries (13 in all).

The database counts and computes percentiles; Python receives one row per week and route, per
reason, per group, per stage or per activation, never one row per run. So the page costs the
same number of queries with twenty runs or a million, and the run indexes keep each one short.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import (
    Count,
    Max,
    Q,
)

from approvals.models import ApprovalRequest, ApprovalStatus
from audit.models import AuditEvent
from automation.models import StageRecord, State
from reports.aggregates import Percentile, Seconds
from reports.rollups import (
    Cell,
    counts,
)

WEEKS = 12
IMPACT_WINDOW = timedelta(days=7)
MAX_ACTIVATIONS = 20
PENDING_LIMIT = 20

# Where a run goes to a person: (stage, stage outcome) -> the reason shown.
HANDOFFS = {
    ("decide", "approval_required"): "approval",
    ("decide", "low_confidence"): "low confidence",
    ("classify", "classification_invalid"): "invalid output",
    ("classify", "extraction_invalid"): "extraction",
    ("classify", "retry_exhausted"): "retries exhausted",
    ("execute", "unavailable"): "effect unavailable",
    ("execute", "uncertain"): "effect uncertain",
    ("execute", "rejected"): "effect rejected",
}
STAGE_ORDER = (
    "intake",
    "validate",
    "normalize",
    "enrich",
    "classify",
    "decide",
    "approve",
    "execute",
    "complete",
)
DECIDED_BY_A_PERSON = (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)


@dataclass(frozen=True)
class Period:
    """[since, until): what the dashboard looks at."""

    since: datetime
    until: datetime

    @property
    def length(self) -> timedelta:
        return self.until - self.since

    @property
    def previous(self) -> Period:
        return Period(self.since - self.length, self.since)


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


# --- 1. straight-through rate per week ------------------------------------------------------


@dataclass(frozen=True)
class Share:
    runs: int = 0
    completed: int = 0
    straight_through: int = 0

    @property
    def rate(self) -> float | None:
        return _share(self.straight_through, self.runs)

    def __add__(self, other: Share) -> Share:
        return Share(
            self.runs + other.runs,
            self.completed + other.completed,
            self.straight_through + other.straight_through,
        )


@dataclass(frozen=True)
class Week:
    start: datetime
    overall: Share
    routes: dict[str, Share]

    def route(self, name: str) -> Share:
        return self.routes.get(name, Share())


@dataclass(frozen=True)
class Activation:
    version: str
    at: datetime
    previous: str


@dataclass(frozen=True)
class StraightThrough:
    weeks: list[Week]
    routes: list[str]
    # Least-squares slope of the weekly rate, in percentage points per week (None: too few weeks).
    trend: float | None
    route_trends: dict[str, float | None]
    activations: list[Activation]

    @property
    def since(self) -> datetime:
        return self.weeks[0].start

    @property
    def until(self) -> datetime:
        return self.weeks[-1].start + timedelta(weeks=1)


def week_start(moment: datetime) -> datetime:
    """Monday 00:00 of the week holding `moment` (the reports' weeks are ISO weeks)."""
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


def trend(rates: list[float | None]) -> float | None:
    """Slope of a least-squares line through the weeks that had runs, in points per week."""
    points = [(x, 100 * y) for x, y in enumerate(rates) if y is not None]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def activations(*, since: datetime, until: datetime) -> list[Activation]:
    """Policy activations from the audit trail (a version keeps only its latest activation)."""
    rows = (
        AuditEvent.objects.filter(
            action="policy.activated", created_at__gte=since, created_at__lt=until
        )
        .order_by("created_at", "pk")
        .values_list("created_at", "data")[:MAX_ACTIVATIONS]
    )
    return [_activation(at, data) for at, data in rows]


def _activation(at: datetime, data: dict[str, Any]) -> Activation:
    return Activation(str(data.get("version", "")), at, str(data.get("previous") or ""))


def straight_through(*, period: Period, weeks: int = WEEKS) -> StraightThrough:
    """Runs received each week that completed with no person touching them, overall and by route.

    The weeks are the `weeks` ISO weeks ending with the one that holds the period's end.
    """
    first = week_start(period.until - timedelta(microseconds=1)) - timedelta(weeks=weeks - 1)
    starts = [first + timedelta(weeks=i) for i in range(weeks)]
    # The last week stops at the period's end: runs received after it are not counted yet.
    found = counts([(start, min(start + timedelta(weeks=1), period.until)) for start in starts])
    cells = {
        (start, route): share
        for start, week in zip(starts, found, strict=True)
        for route, share in _shares(week).items()
    }
    routes = sorted({route for _, route in cells if route})
    table = [_week(start, cells) for start in starts]
    return StraightThrough(
        weeks=table,
        routes=routes,
        trend=trend([w.overall.rate for w in table]),
        route_trends={r: trend([w.route(r).rate for w in table]) for r in routes},
        activations=activations(since=first, until=period.until),
    )


def _shares(cells: list[Cell]) -> dict[str, Share]:
    """Runs, completed and straight-through runs by route."""
    shares: dict[str, Share] = {}
    for c in cells:
        completed = c.runs if c.state == State.COMPLETED else 0
        straight = completed if not c.touched else 0
        shares[c.route] = shares.get(c.route, Share()) + Share(c.runs, completed, straight)
    return shares


def _week(start: datetime, cells: dict[tuple[datetime, str], Share]) -> Week:
    # Runs no policy routed (held or failed before a decision) count in the overall share only.
    mine = {route: share for (week, route), share in cells.items() if week == start}
    overall = reduce(lambda a, b: a + b, mine.values(), Share())
    return Week(start, overall, {route: share for route, share in mine.items() if route})


# --- 2. where work goes to people -----------------------------------------------------------


@dataclass(frozen=True)
class Handoff:
    stage: str
    outcome: str
    reason: str
    runs: int
    previous: int

    @property
    def change(self) -> int:
        return self.runs - self.previous


def handoffs(*, period: Period) -> list[Handoff]:
    """Runs each stage sent to a person, by reason: this period and the one before, most first."""
    before = period.previous
    sent = reduce(or_, (Q(stage=stage, outcome=outcome) for stage, outcome in HANDOFFS))
    rows = (
        StageRecord.objects.filter(sent, started_at__gte=before.since, started_at__lt=period.until)
        .values("stage", "outcome")
        .annotate(
            runs=Count("run", distinct=True, filter=Q(started_at__gte=period.since)),
            previous=Count("run", distinct=True, filter=Q(started_at__lt=period.since)),
        )
        .order_by()
    )
    counts = {(row["stage"], row["outcome"]): (row["runs"], row["previous"]) for row in rows}
    found = [
        Handoff(stage, outcome, reason, *counts.get((stage, outcome), (0, 0)))
        for (stage, outcome), reason in HANDOFFS.items()
    ]
    # Stable: equal counts keep the pipeline's order.
    return sorted(found, key=lambda h: (-h.runs, -h.previous))


# --- 3. waiting for approval ----------------------------------------------------------------


@dataclass(frozen=True)
class Waits:
    group: str  # "" for every group together
    decided: int
    median: float | None  # seconds
    p90: float | None
    longest: float | None


@dataclass(frozen=True)
class PendingApproval:
    request_id: int
    run_id: int
    event_id: str
    effect: str
    group: str
    owner: str
    created_at: datetime
    age: timedelta
    escalated: bool


@dataclass(frozen=True)
class ApprovalWaiting:
    overall: Waits
    groups: list[Waits]
    pending: list[PendingApproval]
    pending_total: int

    @property
    def oldest(self) -> PendingApproval | None:
        return self.pending[0] if self.pending else None


def _seconds(value: float | None) -> float | None:
    # SQLite's julianday() carries float noise below a millisecond: waits are whole seconds.
    return None if value is None else float(round(value))


def _wait_stats(group: str, row: dict[str, Any]) -> Waits:
    return Waits(
        group=group,
        decided=row["decided"],
        median=_seconds(row["median"]),
        p90=_seconds(row["p90"]),
        longest=_seconds(row["longest"]),
    )


def approval_waits(*, period: Period, now: datetime, limit: int = PENDING_LIMIT) -> ApprovalWaiting:
    """Waits of the approvals a person decided in the period; the pending ones, oldest first."""
    decided = ApprovalRequest.objects.filter(
        status__in=DECIDED_BY_A_PERSON,
        decided_at__gte=period.since,
        decided_at__lt=period.until,
    ).annotate(wait=Seconds("decided_at", "created_at"))
    stats = {
        "decided": Count("pk"),
        "median": Percentile("wait", fraction=0.5),
        "p90": Percentile("wait", fraction=0.9),
        "longest": Max("wait"),
    }
    overall = _wait_stats("", decided.aggregate(**stats))
    groups = decided.values("group").annotate(**stats).order_by("group")
    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
    oldest = pending.select_related("run", "run__owner").order_by("created_at", "pk")[:limit]
    return ApprovalWaiting(
        overall=overall,
        groups=[_wait_stats(row["group"], row) for row in groups],
        pending=[_pending(request, now) for request in oldest],
        pending_total=pending.count(),
    )


def _pending(request: ApprovalRequest, now: datetime) -> PendingApproval:
    escalated = request.escalated_at is not None
    owner = request.run.owner
    if owner is not None:
        who = owner.get_username()
    else:
        who = request.escalate_to if escalated and request.escalate_to else request.group
    return PendingApproval(
        request_id=request.pk,
        run_id=request.run_id,
        event_id=request.run.event_id,
        effect=request.effect,
        group=request.group,
        owner=who,
        created_at=request.created_at,
        age=now - request.created_at,
        escalated=escalated,
    )


# --- 4. rule changes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rates:
    runs: int
    completed: int
    straight_through: int
    approval: int
    blocked: int

    @property
    def completed_rate(self) -> float | None:
        return _share(self.completed, self.runs)

    @property
    def straight_through_rate(self) -> float | None:
        return _share(self.straight_through, self.runs)

    @property
    def approval_rate(self) -> float | None:
        return _share(self.approval, self.runs)

    @property
    def blocked_rate(self) -> float | None:
        return _share(self.blocked, self.runs)


@dataclass(frozen=True)
class RuleChange:
    version: str
    previous_version: str
    activated_at: datetime
    window: timedelta
    before: Rates
    after: Rates


def rates_in_windows(windows: list[tuple[datetime, datetime]]) -> list[Rates]:
    """The run rates of each [since, until) window, from the rollups (at most four queries)."""
    return [_rates(cells) for cells in counts(windows)]


def _rates(cells: list[Cell]) -> Rates:
    completed = [c for c in cells if c.state == State.COMPLETED]
    return Rates(
        runs=sum(c.runs for c in cells),
        completed=sum(c.runs for c in completed),
        straight_through=sum(c.runs for c in completed if not c.touched),
        approval=sum(c.runs for c in cells if c.asked_approval),
        blocked=sum(c.runs for c in cells if c.state == State.BLOCKED),
    )


def impacts(
    found: list[Activation], *, now: datetime, window: timedelta = IMPACT_WINDOW
) -> list[RuleChange]:
    """Rates in equal windows before and after each activation.

    The window is `window`, or the time since the activation when that is shorter: the after
    window never reaches into the future, and the before window is cut to the same length.
    """
    found = [a for a in found if a.at < now]
    spans = [min(window, now - a.at) for a in found]
    windows: list[tuple[datetime, datetime]] = []
    for activation, span in zip(found, spans, strict=True):
        windows += [(activation.at - span, activation.at), (activation.at, activation.at + span)]
    rates = rates_in_windows(windows)
    return [
        RuleChange(a.version, a.previous, a.at, span, rates[2 * i], rates[2 * i + 1])
        for i, (a, span) in enumerate(zip(found, spans, strict=True))
    ]


def rule_changes(*, period: Period, now: datetime) -> list[RuleChange]:
    """Every policy activation in the period, with its before and after rates."""
    return impacts(activations(since=period.since, until=period.until), now=now)


def policy_impacts(*, now: datetime) -> list[RuleChange]:
    """The latest activations of all time, newest first (the policy page)."""
    rows = (
        AuditEvent.objects.filter(action="policy.activated")
        .order_by("-created_at", "-pk")
        .values_list("created_at", "data")[:MAX_ACTIVATIONS]
    )
    return impacts([_activation(at, data) for at, data in rows], now=now)


# --- 5. stage durations ---------------------------------------------------------------------


@dataclass(frozen=True)
class StageDuration:
    stage: str
    attempts: int
    median_ms: float
    p95_ms: float


def stage_durations(*, period: Period) -> list[StageDuration]:
    """Median and 95th percentile of each stage's attempts that started in the period."""
    rows = (
        StageRecord.objects.filter(started_at__gte=period.since, started_at__lt=period.until)
        .values("stage")
        .annotate(
            attempts=Count("pk"),
            median=Percentile("duration_ms", fraction=0.5),
            p95=Percentile("duration_ms", fraction=0.95),
        )
        .order_by()
    )
    found = [
        StageDuration(row["stage"], row["attempts"], row["median"], row["p95"]) for row in rows
    ]
    order = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    return sorted(found, key=lambda s: (order.get(s.stage, len(order)), s.stage))


# --- the dashboard --------------------------------------------------------------------------


@dataclass(frozen=True)
class Dashboard:
    period: Period
    straight_through: StraightThrough
    handoffs: list[Handoff]
    approvals: ApprovalWaiting
    rule_changes: list[RuleChange]
    stages: list[StageDuration]


def dashboard(*, period: Period, now: datetime) -> Dashboard:
    return Dashboard(
        period=period,
        straight_through=straight_through(period=period),
        handoffs=handoffs(period=period),
        approvals=approval_waits(period=period, now=now),
        rule_changes=rule_changes(period=period, now=now),
        stages=stage_durations(period=period),
    )
