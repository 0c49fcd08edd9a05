"""The histograms' buckets keep three significant digits, and a percentile read from them is
PostgreSQL's percentile_cont over the rounded values."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from reports.aggregates import percentile_cont
from reports.histograms import bucket, bucket_sql, percentile
from reports.models import StageHour
from reports.spans import ceil_hour, clean_hours, floor_week, merge, whole_weeks

VALUES = [0, 7, 999, 1000, 1009, 1234, 9_999, 10_000, 123_456, 99_999_999, 2_147_483_647]


def test_a_bucket_keeps_three_significant_digits_and_lies_within_one_percent() -> None:
    assert [bucket(v) for v in VALUES] == [
        0, 7, 999, 1000, 1000, 1230, 9_990, 10_000, 123_000, 99_900_000, 2_140_000_000,
    ]  # fmt: skip
    for value in range(1, 50_000, 7):
        assert bucket(value) <= value < bucket(value) * 1.01 + 1


@pytest.mark.django_db
def test_the_database_rounds_as_python_does() -> None:
    start = datetime(2026, 11, 30, tzinfo=UTC)
    StageHour.objects.bulk_create(
        StageHour(start=start, stage="classify", outcome="ok", bucket=value, total=1)
        for value in VALUES
    )
    rows = StageHour.objects.annotate(rounded=bucket_sql("bucket")).values_list("bucket", "rounded")
    assert sorted(rows) == [(value, bucket(value)) for value in VALUES]


def test_percentiles_from_a_histogram_are_percentile_cont_over_the_buckets() -> None:
    generator = random.Random(7)
    for size in (1, 2, 3, 10, 101, 1000):
        values = [bucket(int(generator.lognormvariate(6, 1.5))) for _ in range(size)]
        histogram = dict(Counter(values))
        for fraction in (0.0, 0.5, 0.9, 0.95, 1.0):
            expected = percentile_cont(sorted(values), fraction)
            assert percentile(histogram, fraction) == pytest.approx(expected)
    assert percentile({}, 0.5) is None


def test_whole_weeks_start_on_monday_utc_and_no_bound_cuts_one() -> None:
    day = timedelta(days=1)
    thursday = datetime(2026, 10, 1, tzinfo=UTC)  # a Thursday
    days = [(thursday, thursday + 40 * day)]
    mondays = [
        datetime(2026, 10, 5, tzinfo=UTC) + i * 7 * day for i in range(6)
    ]  # to Monday 9 November
    assert whole_weeks(days, [thursday, thursday + 40 * day]) == [(mondays[0], mondays[-1])]
    # A bound inside the third week (a Wednesday) leaves that week to the days.
    cut = mondays[2] + 2 * day
    assert whole_weeks(days, [thursday, cut, thursday + 40 * day]) == [
        (mondays[0], mondays[2]),
        (mondays[3], mondays[5]),
    ]
    # A bound on a Monday cuts nothing.
    assert whole_weeks(days, [thursday, mondays[1], thursday + 40 * day]) == [
        (mondays[0], mondays[-1])
    ]
    assert floor_week(cut + timedelta(hours=5)) == mondays[2]
    assert whole_weeks([(mondays[0], mondays[0] + 6 * day)], []) == []


def test_clean_hours_are_the_whole_hours_no_bound_cuts_and_no_change_touched() -> None:
    """Against the definition, hour by hour, on random spans, bounds and changed hours."""
    generator = random.Random(11)
    origin = datetime(2026, 11, 2, tzinfo=UTC)
    hour = timedelta(hours=1)
    for _ in range(200):
        moments = sorted(
            origin + timedelta(minutes=generator.choice([0, 60, 90, 600, 1440, 2000]) * k)
            for k in generator.sample(range(1, 60), 4)
        )
        # Disjoint, overlapping or nested: another span's bound can fall inside an hour.
        a, b, c, d = moments
        spans = generator.choice([[(a, b), (c, d)], [(a, c), (b, d)], [(a, d), (b, c)]])
        bounds = sorted({m for span in spans for m in span})
        dirty = {origin + hour * generator.randrange(0, 3000) for _ in range(5)}
        covered = merge(spans)
        expected: set[datetime] = set()
        for since, until in covered:
            start = ceil_hour(since)
            while start + hour <= until:
                inside = any(start < b < start + hour for b in bounds)
                if start not in dirty and not inside:
                    expected.add(start)
                start += hour
        found = clean_hours(covered, bounds, dirty)
        hours = {a + hour * i for a, b in found for i in range(int((b - a) / hour))}
        assert hours == expected
        assert found == merge(found)  # sorted, disjoint, adjacent ranges joined
