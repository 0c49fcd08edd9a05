"""Reads behind the reports dashboard: each panel is a few aggregate queries (13 in all).

The database counts and computes percentiles; Python receives one row per week and route, per
reason, per group, per stage or per activation, never one row per run. So the page costs the
same number of queries with twenty runs or a million, and the run indexes keep each one short.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import reduce
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.db.models.functions import TruncWeek
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalStatus
from audit.models import AuditAction, AuditEvent
from automation.models import Label, QAReview, QAStatus, StageName, StageOutcome, State
from reports import histograms
from reports.histograms import Histogram, Key
from reports.models import RollupMark
from reports.rollups import UNREAD, Cell, Unread, counts, current_mark
from reports.spans import Span

WEEKS = 12
IMPACT_WINDOW = timedelta(days=7)
MAX_ACTIVATIONS = 20
PENDING_LIMIT = 20

# Where a run goes to a person: (stage, stage outcome) -> the reason shown.
HANDOFFS = {
    (StageName.DECIDE, StageOutcome.APPROVAL_REQUIRED): "approval",
    (StageName.DECIDE, StageOutcome.LOW_CONFIDENCE): "low confidence",
    (StageName.DECIDE, StageOutcome.RISK_SIGNAL): "risk signal",
    (StageName.CLASSIFY, StageOutcome.CLASSIFICATION_INVALID): "invalid output",
    (StageName.CLASSIFY, StageOutcome.EXTRACTION_INVALID): "extraction",
    (StageName.CLASSIFY, StageOutcome.RETRY_EXHAUSTED): "retries exhausted",
    (StageName.EXECUTE, StageOutcome.UNAVAILABLE): "effect unavailable",
    (StageName.EXECUTE, StageOutcome.UNCERTAIN): "effect uncertain",
    (StageName.EXECUTE, StageOutcome.REJECTED): "effect rejected",
}
STAGE_ORDER: tuple[str, ...] = tuple(StageName)
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
            action=AuditAction.POLICY_ACTIVATED, created_at__gte=since, created_at__lt=until
        )
        .order_by("created_at", "pk")
        .values_list("created_at", "data")[:MAX_ACTIVATIONS]
    )
    return [_activation(at, data) for at, data in rows]


def _activation(at: datetime, data: dict[str, Any]) -> Activation:
    return Activation(str(data.get("version", "")), at, str(data.get("previous") or ""))


def week_spans(period: Period, weeks: int = WEEKS) -> list[Span]:
    """The `weeks` ISO weeks ending with the one that holds the period's end; the last stops
    at the period's end (runs received after it are not counted yet)."""
    first = week_start(period.until - timedelta(microseconds=1)) - timedelta(weeks=weeks - 1)
    starts = [first + timedelta(weeks=i) for i in range(weeks)]
    return [(start, min(start + timedelta(weeks=1), period.until)) for start in starts]


def straight_through(
    *, period: Period, weeks: int = WEEKS, found: list[list[Cell]] | None = None
) -> StraightThrough:
    """Runs received each week that completed with no person touching them, overall and by route.

    The weeks are those of `week_spans`; `found`, their cells when already counted.
    """
    spans = week_spans(period, weeks)
    starts = [start for start, _ in spans]
    first = starts[0]
    found = found if found is not None else counts(spans)
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


@dataclass(frozen=True)
class Rolled:
    """What the histogram rollups say of a period: stage attempts in it and in the period
    before (hand-offs, stage durations), and approval waits in it. Two queries after the
    marks: the changed hours, then one UNION ALL per kind."""

    stages: dict[Key, Histogram]
    # Only how many: each key's histogram is one bucket, histograms.TOTAL.
    stages_before: dict[Key, Histogram]
    waits: dict[Key, Histogram]


def rolled(*, period: Period, mark: RollupMark | Unread | None = UNREAD) -> Rolled:
    if isinstance(mark, Unread):
        mark = current_mark()
    changed = histograms.changed_hours(mark)
    spans = [(period.previous.since, period.previous.until), (period.since, period.until)]
    before, now = histograms.histograms(
        histograms.STAGES,
        spans,
        mark=mark,
        dirty=changed[histograms.STAGES],
        totals_before=period.since,
    )
    (waits,) = histograms.histograms(
        histograms.WAITS, spans[1:], mark=mark, dirty=changed[histograms.WAITS]
    )
    return Rolled(stages=now, stages_before=before, waits=waits)


def handoffs(*, period: Period, figures: Rolled | None = None) -> list[Handoff]:
    """Times each stage sent a run to a person, by reason: this period and the one before,
    most first. A run sent to people twice for the same reason counts twice: each was work."""
    figures = figures or rolled(period=period)

    def sent(found: dict[Key, Histogram], key: tuple[str, str]) -> int:
        return sum(found.get(key, {}).values())

    found = [
        Handoff(
            stage,
            outcome,
            reason,
            *(sent(f, (stage, outcome)) for f in (figures.stages, figures.stages_before)),
        )
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
    # Waits are whole seconds: EXTRACT(EPOCH ...) carries the microseconds.
    return None if value is None else float(round(value))


def _wait_stats(group: str, waited: Histogram) -> Waits:
    return Waits(
        group=group,
        decided=sum(waited.values()),
        median=_seconds(histograms.percentile(waited, 0.5)),
        p90=_seconds(histograms.percentile(waited, 0.9)),
        longest=_seconds(max(waited, default=None)),
    )


def approval_waits(
    *, period: Period, now: datetime, limit: int = PENDING_LIMIT, figures: Rolled | None = None
) -> ApprovalWaiting:
    """Waits of the approvals a person decided in the period; the pending ones, oldest first."""
    figures = figures or rolled(period=period)
    groups = sorted((group, histogram) for (group,), histogram in figures.waits.items())
    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING)
    oldest = pending.select_related("run", "run__owner").order_by("created_at", "pk")[:limit]
    return ApprovalWaiting(
        overall=_wait_stats("", histograms.combined(h for _, h in groups)),
        groups=[_wait_stats(group, histogram) for group, histogram in groups],
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


def impact_windows(
    found: list[Activation], *, now: datetime, window: timedelta = IMPACT_WINDOW
) -> list[Span]:
    """The windows before and after each past activation, two per activation, in order.

    A window is `window`, or the time since the activation when that is shorter: the after
    window never reaches into the future, and the before window is cut to the same length.
    """
    windows: list[Span] = []
    for activation in found:
        if activation.at < now:
            span = min(window, now - activation.at)
            windows += [
                (activation.at - span, activation.at),
                (activation.at, activation.at + span),
            ]
    return windows


def impacts(
    found: list[Activation],
    *,
    now: datetime,
    window: timedelta = IMPACT_WINDOW,
    counted: list[list[Cell]] | None = None,
) -> list[RuleChange]:
    """Rates in equal windows before and after each activation (impact_windows); `counted`,
    the windows' cells when already counted."""
    found = [a for a in found if a.at < now]
    windows = impact_windows(found, now=now, window=window)
    rates = (
        [_rates(cells) for cells in counted] if counted is not None else rates_in_windows(windows)
    )
    return [
        RuleChange(a.version, a.previous, a.at, after - at, rates[2 * i], rates[2 * i + 1])
        for i, (a, (at, after)) in enumerate(zip(found, windows[1::2], strict=True))
    ]


def rule_changes(*, period: Period, now: datetime) -> list[RuleChange]:
    """Every policy activation in the period, with its before and after rates."""
    return impacts(activations(since=period.since, until=period.until), now=now)


def policy_impacts(*, now: datetime) -> list[RuleChange]:
    """The latest activations of all time, newest first (the policy page)."""
    rows = (
        AuditEvent.objects.filter(action=AuditAction.POLICY_ACTIVATED)
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


def stage_durations(*, period: Period, figures: Rolled | None = None) -> list[StageDuration]:
    """Median and 95th percentile of each stage's attempts that started in the period."""
    figures = figures or rolled(period=period)
    by_stage: dict[str, list[Histogram]] = {}
    for (stage, _), histogram in figures.stages.items():
        by_stage.setdefault(stage, []).append(histogram)
    found = []
    for stage, parts in by_stage.items():
        took = histograms.combined(parts)
        median, p95 = histograms.percentile(took, 0.5), histograms.percentile(took, 0.95)
        found.append(StageDuration(stage, sum(took.values()), median or 0.0, p95 or 0.0))
    order = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    return sorted(found, key=lambda s: (order.get(s.stage, len(order)), s.stage))


# --- the dashboard --------------------------------------------------------------------------


# --- 6. measured quality: QA samples and people's labels --------------------------------

# The normal quantile of a two-sided 95% interval.
Z95 = 1.959964


@dataclass(frozen=True)
class ErrorRate:
    """Of the sampled straight-through runs a person reviewed, how many were read wrongly,
    with a 95% Wilson interval (honest with few samples, never outside 0..1)."""

    reviewed: int
    wrong: int

    @property
    def rate(self) -> float | None:
        return _share(self.wrong, self.reviewed)

    @property
    def interval(self) -> tuple[float, float] | None:
        n = self.reviewed
        if not n:
            return None
        p = self.wrong / n
        centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n**2)) / (1 + Z95**2 / n)
        return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class QualityWeek:
    start: datetime
    route: str  # "" for all routes
    errors: ErrorRate


@dataclass(frozen=True)
class VersionAccuracy:
    classifier_version: str
    labels: int
    right: int

    @property
    def accuracy(self) -> float | None:
        return _share(self.right, self.labels)


@dataclass(frozen=True)
class Quality:
    weeks: list[QualityWeek]  # all routes first, then each route, week by week
    by_version: list[VersionAccuracy]
    labels_per_week: list[tuple[datetime, int]]

    def overall(self, start: datetime) -> ErrorRate | None:
        """The week's error rate over every route, for the straight-through table."""
        return next((w.errors for w in self.weeks if w.start == start and not w.route), None)


def measured_quality(*, period: Period) -> Quality:
    """QA samples taken in the period (by the week their run went through) and reviewed, and
    the labels people gave in it. Samples are a small share of runs: these read their own
    tables, not the runs."""
    reviewed = QAReview.objects.filter(
        created_at__gte=period.since, created_at__lt=period.until
    ).exclude(status=QAStatus.OPEN)
    rows = reviewed.annotate(week=TruncWeek("created_at")).values("week", "route")
    cells = rows.annotate(
        reviewed=Count("id"), wrong=Count("id", filter=Q(status=QAStatus.CORRECTED))
    ).order_by("week", "route")
    per_route = [
        QualityWeek(c["week"], c["route"], ErrorRate(c["reviewed"], c["wrong"])) for c in cells
    ]
    totals: dict[datetime, ErrorRate] = {}
    for week in per_route:
        before = totals.get(week.start, ErrorRate(0, 0))
        totals[week.start] = ErrorRate(
            before.reviewed + week.errors.reviewed, before.wrong + week.errors.wrong
        )
    overall = [QualityWeek(start, "", errors) for start, errors in sorted(totals.items())]
    labels = Label.objects.filter(created_at__gte=period.since, created_at__lt=period.until)
    versions = (
        labels.values("classifier_version")
        .annotate(n=Count("id"), right=Count("id", filter=Q(reading_was_right=True)))
        .order_by("-n", "classifier_version")
    )
    weekly = (
        labels.annotate(week=TruncWeek("created_at"))
        .values("week")
        .annotate(n=Count("id"))
        .order_by("week")
    )
    return Quality(
        weeks=overall + per_route,
        by_version=[VersionAccuracy(v["classifier_version"], v["n"], v["right"]) for v in versions],
        labels_per_week=[(w["week"], w["n"]) for w in weekly],
    )


# --- 7. what reading costs ------------------------------------------------------------------

# The days shown one by one: the period's last ones (its totals cover all of it).
SPEND_DAYS = 31


@dataclass(frozen=True)
class Spend:
    """Runs received and what their classifier calls cost, beside how many went straight
    through (the tokens the model server reported, priced by GATEHOUSE_OPENAI_PRICES)."""

    runs: int = 0
    completed: int = 0
    straight_through: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal(0)

    @property
    def rate(self) -> float | None:
        return _share(self.straight_through, self.runs)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_per_run(self) -> Decimal | None:
        return self.cost / self.runs if self.runs else None

    @property
    def cost_per_straight_through(self) -> Decimal | None:
        """What a run that needed nobody cost, counting the reading of every run."""
        return self.cost / self.straight_through if self.straight_through else None

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.runs + other.runs,
            self.completed + other.completed,
            self.straight_through + other.straight_through,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost + other.cost,
        )


def _spend(cell: Cell) -> Spend:
    completed = cell.runs if cell.state == State.COMPLETED else 0
    return Spend(
        cell.runs,
        completed,
        completed if not cell.touched else 0,
        cell.prompt_tokens,
        cell.completion_tokens,
        cell.cost,
    )


@dataclass(frozen=True)
class ModelSpend:
    total: Spend
    days: list[tuple[datetime, Spend]]  # the period's last days, newest first
    routes: list[tuple[str, Spend]]  # "" for runs stopped before policy gave them a route
    versions: list[tuple[str, Spend]]  # by the classifier version stamped on the runs


def spend_spans(period: Period, days: int = SPEND_DAYS) -> list[Span]:
    """The period, then its last `days` days (of the deployment's time zone, cut at the
    period's bounds), newest first."""
    spans: list[Span] = [(period.since, period.until)]
    end = period.until
    while len(spans) <= days and end > period.since:
        local = timezone.localtime(end - timedelta(microseconds=1))
        start = max(
            timezone.make_aware(datetime.combine(local.date(), datetime.min.time())), period.since
        )
        spans.append((start, end))
        end = start
    return spans


def model_spend(*, period: Period, found: list[list[Cell]] | None = None) -> ModelSpend:
    """Cost and tokens per day, route and classifier version, with the straight-through rate
    of the same runs: by the hour each run was received, from the rollups (one count)."""
    spans = spend_spans(period)
    found = found if found is not None else counts(spans)
    whole, *days = found
    routes: dict[str, Spend] = {}
    versions: dict[str, Spend] = {}
    for cell in whole:
        spent = _spend(cell)
        routes[cell.route] = routes.get(cell.route, Spend()) + spent
        versions[cell.classifier_version] = versions.get(cell.classifier_version, Spend()) + spent
    total = reduce(lambda a, b: a + b, routes.values(), Spend())

    def by_cost(items: dict[str, Spend]) -> list[tuple[str, Spend]]:
        return sorted(items.items(), key=lambda item: (-item[1].cost, -item[1].runs, item[0]))

    return ModelSpend(
        total=total,
        days=[
            (start, reduce(lambda a, b: a + b, map(_spend, cells), Spend()))
            for (start, _), cells in zip(spans[1:], days, strict=True)
        ],
        routes=by_cost(routes),
        versions=by_cost(versions),
    )


@dataclass(frozen=True)
class Dashboard:
    period: Period
    straight_through: StraightThrough
    handoffs: list[Handoff]
    approvals: ApprovalWaiting
    rule_changes: list[RuleChange]
    stages: list[StageDuration]
    quality: Quality
    spend: ModelSpend


@contextmanager
def report_memory() -> Iterator[None]:
    """A transaction whose sorts and hashes may use settings.REPORTS_WORK_MEM before they
    spill to disk (the dashboard's sums over many rollup rows), and only its own: set_config
    with is_local, as SET LOCAL, ends with the transaction."""
    # No savepoint inside a transaction already open: the setting lasts until its end.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('work_mem', %s, true)", [settings.REPORTS_WORK_MEM])
        yield


def dashboard(*, period: Period, now: datetime) -> Dashboard:
    mark = current_mark()
    figures = rolled(period=period, mark=mark)
    # The weekly straight-through rates, the cost of reading and the rates around each
    # activation of the period in one count.
    activated = activations(since=period.since, until=period.until)
    weeks, spent = week_spans(period), spend_spans(period)
    windows = impact_windows(activated, now=now)
    found = counts(weeks + spent + windows, mark=mark)
    changes = found[len(weeks) + len(spent) :]
    return Dashboard(
        period=period,
        straight_through=straight_through(period=period, found=found[: len(weeks)]),
        spend=model_spend(period=period, found=found[len(weeks) : len(weeks) + len(spent)]),
        handoffs=handoffs(period=period, figures=figures),
        approvals=approval_waits(period=period, now=now, figures=figures),
        rule_changes=impacts(activated, now=now, counted=changes),
        stages=stage_durations(period=period, figures=figures),
        quality=measured_quality(period=period),
    )
