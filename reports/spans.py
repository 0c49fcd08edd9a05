"""Time spans for the rollups: which whole hours (and days) of a period a rollup can answer,
and which parts must be counted from the raw rows.

A span is [since, until). Readers merge the spans they are asked for, take the whole hours no
span bound cuts and no pending change touched from a rollup, and count the rest raw. Rows are
summed per segment, the stretch between two consecutive bounds, so each asked span gets
exactly the segments inside it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import reduce
from operator import or_

from django.contrib.postgres.fields import ArrayField
from django.db.models import DateTimeField, F, Func, IntegerField, Q, Value

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
WEEK = timedelta(weeks=1)

Span = tuple[datetime, datetime]


def within(spans: Iterable[Span], field: str) -> Q:
    return reduce(or_, (Q(**{f"{field}__gte": a, f"{field}__lt": b}) for a, b in spans))


def merge(spans: Iterable[Span]) -> list[Span]:
    merged: list[Span] = []
    for since, until in sorted(s for s in spans if s[0] < s[1]):
        if merged and since <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], until))
        else:
            merged.append((since, until))
    return merged


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(moment: datetime) -> datetime:
    floor = floor_hour(moment)
    return floor if floor == moment else floor + HOUR


def floor_day(moment: datetime) -> datetime:
    return floor_hour(moment).replace(hour=0)


def floor_week(moment: datetime) -> datetime:
    """The Monday 00:00 UTC that starts the moment's ISO week (PostgreSQL's date_trunc)."""
    day = floor_day(moment)
    return day - day.weekday() * DAY


def _cut(bounds: list[datetime], since: datetime, until: datetime) -> bool:
    """Whether a bound lies strictly inside (since, until)."""
    return bisect.bisect_right(bounds, since) < bisect.bisect_left(bounds, until)


def clean_hours(covered: list[Span], bounds: list[datetime], dirty: set[datetime]) -> list[Span]:
    """Whole hours inside the spans that no bound cuts and no change touched, as ranges: the
    whole hours of each span, less the dirty hours and the hours a bound falls inside."""
    clean: list[Span] = []
    cut = {floor_hour(b) for b in bounds if floor_hour(b) != b}
    for since, until in covered:
        start, end = ceil_hour(since), floor_hour(until)
        for hole in sorted(h for h in dirty | cut if start <= h < end):
            if start < hole:
                clean.append((start, hole))
            start = hole + HOUR
        if start < end:
            clean.append((start, end))
    return merge(clean)


def whole_days(clean: list[Span], bounds: list[datetime]) -> list[Span]:
    """The UTC days lying wholly inside the clean ranges that no bound cuts, as ranges."""
    return _whole(clean, bounds, floor_day, DAY)


def whole_weeks(days: list[Span], bounds: list[datetime]) -> list[Span]:
    """The ISO weeks (from Monday 00:00 UTC) lying wholly inside the ranges of whole days."""
    return _whole(days, bounds, floor_week, WEEK)


def _whole(
    ranges: list[Span],
    bounds: list[datetime],
    floor: Callable[[datetime], datetime],
    step: timedelta,
) -> list[Span]:
    found: list[Span] = []
    for since, until in ranges:
        start = floor(since)
        start = start if start == since else start + step
        while start + step <= until:
            if not _cut(bounds, start, start + step):
                found.append((start, start + step))
            start += step
    return merge(found)


def minus(covered: list[Span], holes: list[Span]) -> list[Span]:
    """The parts of `covered` outside `holes` (both sorted, disjoint)."""
    left: list[Span] = []
    for since, until in covered:
        start = since
        for a, b in holes:
            if b <= start or a >= until:
                continue
            if a > start:
                left.append((start, a))
            start = max(start, b)
        if start < until:
            left.append((start, until))
    return left


def segment(field: str, bounds: list[datetime]) -> Func | Value:
    """Segment i is [bounds[i], bounds[i + 1]): a row's segment decides which spans hold it.

    PostgreSQL's width_bucket(value, thresholds) counts the sorted thresholds at or below the
    value. A CASE of one branch per bound said the same, but a quarter's weeks and days are
    forty bounds, and Django builds and compiles forty conditions for each query."""
    if len(bounds) < 2:
        return Value(0, output_field=IntegerField())
    thresholds = Value(bounds[1:], output_field=ArrayField(DateTimeField()))
    return Func(F(field), thresholds, function="width_bucket", output_field=IntegerField())


def segments_of(span: Span, bounds: list[datetime]) -> range:
    """The segments inside an asked span."""
    return range(bounds.index(span[0]), bounds.index(span[1]))
