"""Histogram rollups: stage attempts by duration (the hand-off and stage-duration panels) and
approval requests by time waited (the approval-wait panel), per hour and per day.

A month holds millions of stage records; the panels need only how many fell in each duration
bucket. A bucket is the value rounded down to three significant digits (0-999 exactly, then
1,000-1,009 is 1,000 and so on), so every value lies within 1% above its bucket, and a
percentile interpolated between buckets is PostgreSQL's `percentile_cont` over the rounded
values. Durations and waits of three digits or fewer come out exact.

How they are kept: like the run rollups (`reports.rollups`), by the job, not the engine.
- The change feed is the ids above two marks on `RollupMark`: stage records (written once,
  when the attempt ends) and approval decisions (a request's wait is known when a person's
  decision closes it). The hour of each such row is recomputed whole from the raw rows, then
  its day from its hours and its week from its days; running the job twice gives the same
  rows.
- Readers take whole clean weeks from the week rows, the remaining whole clean days from the
  day rows, the remaining whole clean hours from the hour rows, and the rest (the partial
  hours at a period's edges, the hours of rows above the marks, everything before the first
  build) from the raw rows: one UNION ALL per panel.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Model,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Round, TruncDay, TruncHour, TruncWeek

from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from automation.models import StageRecord
from reports.aggregates import Seconds, percentile_cont
from reports.models import (
    RollupMark,
    StageDay,
    StageHour,
    StageWeek,
    WaitDay,
    WaitHour,
    WaitWeek,
)
from reports.spans import (
    DAY,
    HOUR,
    WEEK,
    Span,
    clean_hours,
    floor_day,
    floor_hour,
    floor_week,
    merge,
    minus,
    segment,
    segments_of,
    whole_days,
    whole_weeks,
    within,
)

DIGITS = 3
# Rebuilds read a week of raw rows at a time: memory stays bounded whatever the history.
CHUNK = timedelta(days=7)
DECIDED_BY_A_PERSON = (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)

Key = tuple[str, ...]
Histogram = dict[int, int]  # bucket -> rows
# The one bucket of the histograms of spans asked for their totals only (`totals_before`).
TOTAL = -1


def bucket(value: int) -> int:
    """The value rounded down to DIGITS significant digits."""
    step = 1
    while value >= 10**DIGITS * step:
        step *= 10
    return value // step * step


def bucket_sql(field: str) -> Case:
    """bucket() in SQL, for integer columns (PostgreSQL's integer division)."""
    whens = [When(**{f"{field}__lt": 10**DIGITS}, then=F(field))]
    step = 10
    while step < 10**9:  # past any duration in ms or wait in seconds a column holds
        whens.append(When(**{f"{field}__lt": 10**DIGITS * step}, then=F(field) / step * step))
        step *= 10
    return Case(*whens, default=F(field) / step * step, output_field=IntegerField())


def percentile(histogram: Histogram, fraction: float) -> float | None:
    """percentile_cont over the bucketed values, without expanding them."""
    total = sum(histogram.values())
    if not total:
        return None
    position = (total - 1) * fraction
    wanted = {int(position), min(int(position) + 1, total - 1)}
    found: dict[int, float] = {}
    seen = 0
    for value, count in sorted(histogram.items()):
        for rank in wanted:
            if seen <= rank < seen + count:
                found[rank] = value
        seen += count
    ordered = [found[rank] for rank in sorted(wanted)]
    return percentile_cont(ordered, position - int(position))


def combined(histograms: Iterable[Histogram]) -> Histogram:
    total: Histogram = defaultdict(int)
    for histogram in histograms:
        for value, count in histogram.items():
            total[value] += count
    return dict(total)


# --- the two facts --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """One histogrammed kind of row: where its raw rows are, and its three rollup tables."""

    hour: type[Model]
    day: type[Model]
    week: type[Model]
    keys: tuple[str, ...]
    time: str  # the raw rows' time field: a row belongs to the hour of this time
    raw: Callable[[], QuerySet[Any]]  # the raw rows, with `value` annotated (an integer)


def _stage_rows() -> QuerySet[Any]:
    return StageRecord.objects.annotate(value=F("duration_ms"))


def _wait_rows() -> QuerySet[Any]:
    waited = Cast(Round(Seconds("decided_at", "created_at")), IntegerField())
    decided = ApprovalRequest.objects.filter(status__in=DECIDED_BY_A_PERSON)
    return decided.annotate(value=waited)


STAGES = Fact(StageHour, StageDay, StageWeek, ("stage", "outcome"), "started_at", _stage_rows)
WAITS = Fact(WaitHour, WaitDay, WaitWeek, ("group",), "decided_at", _wait_rows)
FACTS = (STAGES, WAITS)


def built(mark: RollupMark | None) -> bool:
    return mark is not None and mark.stage_id is not None and mark.decision_id is not None


def changed_hours(mark: RollupMark | None) -> dict[Fact, set[datetime]]:
    """The hours of the rows above the marks, for each fact: one UNION of key ranges."""
    if mark is None or mark.stage_id is None or mark.decision_id is None:  # not built()
        return {fact: set() for fact in FACTS}
    stages = (
        StageRecord.objects.filter(pk__gt=mark.stage_id)
        .annotate(tag=Value(0), hour=TruncHour("started_at", tzinfo=UTC))
        .values_list("tag", "hour")
        .order_by()
    )
    decided = (
        ApprovalDecision.objects.filter(pk__gt=mark.decision_id, request__decided_at__isnull=False)
        .annotate(tag=Value(1), hour=TruncHour("request__decided_at", tzinfo=UTC))
        .values_list("tag", "hour")
        .order_by()
    )
    found: dict[Fact, set[datetime]] = {fact: set() for fact in FACTS}
    for tag, hour in stages.union(decided):
        found[FACTS[tag]].add(hour)
    return found


# --- reading --------------------------------------------------------------------------------


def histograms(
    fact: Fact,
    spans: Sequence[Span],
    *,
    mark: RollupMark | None,
    dirty: set[datetime],
    totals_before: datetime | None = None,
) -> list[dict[Key, Histogram]]:
    """For each [since, until) span, a histogram per key (stage and outcome, or group): one
    query. Week rows for whole clean weeks, day rows for other whole clean days, hour rows for
    other whole clean hours, raw rows for the rest.

    Rows before `totals_before` (one of the spans' bounds) are counted per key only: the
    histograms of the spans before it hold one bucket, TOTAL. A panel that needs only how
    many (the previous period's hand-offs) is then not sent every bucket."""
    if not spans:
        return []
    bounds = sorted({moment for span in spans for moment in span})
    covered = merge(spans)
    clean = clean_hours(covered, bounds, dirty) if built(mark) else []
    days = whole_days(clean, bounds)
    weeks = whole_weeks(days, bounds)
    parts: list[QuerySet[Any]] = []
    for table, ranges in (
        (fact.week, weeks),
        (fact.day, minus(days, weeks)),
        (fact.hour, minus(clean, days)),
    ):
        if ranges:
            rollup = table._default_manager.filter(within(ranges, "start"))
            parts.append(_summed(rollup, fact, bounds, totals_before))
    raw = minus(covered, clean)
    if raw:
        rows = fact.raw().filter(within(raw, fact.time))
        parts.append(_counted(rows, fact, bounds, totals_before))
    if not parts:  # only empty spans
        return [{} for _ in spans]
    found: dict[int, dict[Key, Histogram]] = defaultdict(lambda: defaultdict(dict))
    for number, *key, value, count in parts[0].union(*parts[1:], all=True):
        histogram = found[number][tuple(key)]
        histogram[value] = histogram.get(value, 0) + int(count)
    return [_in_span(span, bounds, found) for span in spans]


def _summed(
    rows: QuerySet[Any], fact: Fact, bounds: list[datetime], totals_before: datetime | None
) -> QuerySet[Any]:
    return (
        rows.annotate(
            segment=segment("start", bounds),
            b=_bucket("start", F("bucket"), totals_before),
        )
        .values_list("segment", *fact.keys, "b")
        .annotate(n=Sum("total"))
        .order_by()
    )


def _counted(
    rows: QuerySet[Any], fact: Fact, bounds: list[datetime], totals_before: datetime | None
) -> QuerySet[Any]:
    return (
        rows.annotate(
            segment=segment(fact.time, bounds),
            b=_bucket(fact.time, bucket_sql("value"), totals_before),
        )
        .values_list("segment", *fact.keys, "b")
        .annotate(n=Count("*"))
        .order_by()
    )


def _bucket(time: str, bucketed: F | Case, totals_before: datetime | None) -> F | Case:
    """A row's bucket, or TOTAL for a row before `totals_before`. A rollup row used lies
    wholly on one side of it: no bound cuts the hour, day or week it counts."""
    if totals_before is None:
        return bucketed
    return Case(
        When(**{f"{time}__lt": totals_before}, then=Value(TOTAL)),
        default=bucketed,
        output_field=IntegerField(),
    )


def _in_span(
    span: Span, bounds: list[datetime], found: dict[int, dict[Key, Histogram]]
) -> dict[Key, Histogram]:
    inside = [found[number] for number in segments_of(span, bounds) if number in found]
    keys = {key for part in inside for key in part}
    return {key: combined(part.get(key, {}) for part in inside) for key in keys}


# --- writing: the job and the rebuild -------------------------------------------------------


def _hour_rows(fact: Fact, since: datetime, until: datetime) -> Iterator[Model]:
    rows = (
        fact.raw()
        .filter(**{f"{fact.time}__gte": since, f"{fact.time}__lt": until})
        .annotate(start=TruncHour(fact.time, tzinfo=UTC), bucket=bucket_sql("value"))
        .values("start", *fact.keys, "bucket")
        .annotate(n=Count("*"))
        .order_by()
    )
    return _made(fact.hour, fact, rows)


def _day_rows(fact: Fact, since: datetime, until: datetime) -> Iterator[Model]:
    return _sums_of(fact.hour, fact.day, fact, TruncDay("start", tzinfo=UTC), since, until)


def _week_rows(fact: Fact, since: datetime, until: datetime) -> Iterator[Model]:
    return _sums_of(fact.day, fact.week, fact, TruncWeek("start", tzinfo=UTC), since, until)


def _sums_of(
    finer: type[Model],
    table: type[Model],
    fact: Fact,
    period: TruncDay | TruncWeek,
    since: datetime,
    until: datetime,
) -> Iterator[Model]:
    """`table`'s rows for [since, until): the sums of the finer table's rows in each period."""
    rows = (
        finer._default_manager.filter(start__gte=since, start__lt=until)
        .annotate(period=period)
        .values("period", *fact.keys, "bucket")
        .annotate(n=Sum("total"))
        .order_by()
    )
    return _made(table, fact, ({**row, "start": row["period"]} for row in rows))


def _made(table: type[Model], fact: Fact, rows: Iterable[dict[str, Any]]) -> Iterator[Model]:
    for row in rows:
        keys = {key: row[key] for key in fact.keys}
        yield table(start=row["start"], bucket=row["bucket"], total=row["n"], **keys)


def recompute(fact: Fact, spans: Iterable[Span]) -> None:
    """Replace the hour rows of the (whole) hours in `spans`, then the rows of their days, then
    those of their weeks."""
    hours = merge(spans)
    for since, until in hours:
        start = since
        while start < until:
            end = min(start + CHUNK, until)
            fact.hour._default_manager.filter(start__gte=start, start__lt=end).delete()
            fact.hour._default_manager.bulk_create(_hour_rows(fact, start, end), batch_size=2000)
            start = end
    for since, until in merge((floor_day(a), floor_day(b - HOUR) + DAY) for a, b in hours):
        fact.day._default_manager.filter(start__gte=since, start__lt=until).delete()
        fact.day._default_manager.bulk_create(_day_rows(fact, since, until), batch_size=2000)
    for since, until in merge((floor_week(a), floor_week(b - HOUR) + WEEK) for a, b in hours):
        fact.week._default_manager.filter(start__gte=since, start__lt=until).delete()
        fact.week._default_manager.bulk_create(_week_rows(fact, since, until), batch_size=2000)


def advance(mark: RollupMark, cutoff: datetime, newest: Callable[..., int]) -> None:
    """Move the histogram marks up to the newest rows written before the cutoff."""
    stage = newest(StageRecord, cutoff, "finished_at")
    decision = newest(ApprovalDecision, cutoff, "created_at")
    mark.stage_id = max(mark.stage_id or 0, stage)
    mark.decision_id = max(mark.decision_id or 0, decision)


def refresh(stale: dict[Fact, set[datetime]] | None, *, now: datetime) -> int:
    """Recompute the hours the job found changed (`stale`, read before the marks moved), or
    build everything when the histograms were not built yet (`stale` is None)."""
    if stale is None:
        rebuild(since=None, now=now)
        return 0
    for fact, hours in stale.items():
        recompute(fact, [(hour, hour + HOUR) for hour in hours])
    return sum(len(hours) for hours in stale.values())


def rebuild(*, since: datetime | None, now: datetime) -> None:
    """Recount every hour from `since` (all of history without it) from the raw rows."""
    for fact in FACTS:
        ordered = fact.raw().exclude(**{f"{fact.time}__isnull": True}).values_list(fact.time)
        first = ordered.order_by(fact.time).first()
        last = ordered.order_by(f"-{fact.time}").first()
        if since is None:
            fact.hour._default_manager.all().delete()
            fact.day._default_manager.all().delete()
            fact.week._default_manager.all().delete()
        start = floor_hour(since or (first[0] if first else now))
        # Rows stamped ahead of the clock (skew) are counted too.
        until = floor_hour(max(now, last[0] if last else now)) + HOUR
        recompute(fact, [(start, until)])
