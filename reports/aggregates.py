"""SQL pieces the reports need and Django lacks: percentiles and the seconds between two times.

PostgreSQL computes percentiles itself (`percentile_cont ... WITHIN GROUP`). SQLite, the
one-machine trial database, has no percentile function, so one with the same definition
(linear interpolation between the closest ranks) is registered on each of its connections.
Either way the rows never leave the database: a report asks for numbers, not for durations.
"""

from __future__ import annotations

import math
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Aggregate, FloatField, Func

SQLITE_PERCENTILE = "gatehouse_percentile_cont"


def percentile_cont(ordered: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont over sorted values: interpolate at (n - 1) * fraction."""
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class _SqlitePercentile:
    """The aggregate SQLite calls: collects the group's values, interpolates at the end."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.fraction = 0.5

    def step(self, value: float | None, fraction: float) -> None:
        if value is not None:
            self.values.append(float(value))
            self.fraction = fraction

    def finalize(self) -> float | None:
        return percentile_cont(sorted(self.values), self.fraction) if self.values else None


def register_sqlite_functions(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """connection_created receiver: give each new SQLite connection the percentile aggregate."""
    if connection.vendor == "sqlite":
        connection.connection.create_aggregate(SQLITE_PERCENTILE, 2, _SqlitePercentile)


class Percentile(Aggregate):
    """The continuous percentile (0 <= fraction <= 1) of an expression, as a float."""

    function = "percentile_cont"
    name = "Percentile"
    output_field = FloatField()
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression: Any, *, fraction: float, **extra: Any) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"a percentile fraction lies between 0 and 1, not {fraction}")
        # Interpolated into the SQL as a literal: a float we made, never user input.
        super().__init__(expression, fraction=repr(float(fraction)), **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        template = f"{SQLITE_PERCENTILE}(%(expressions)s, %(fraction)s)"
        return self.as_sql(compiler, connection, template=template, **extra_context)


class Seconds(Func):
    """Seconds from `start` to `end` (two datetime expressions), as a float."""

    output_field = FloatField()
    arity = 2
    template = "EXTRACT(EPOCH FROM (%(expressions)s))::double precision"
    arg_joiner = " - "

    def __init__(self, end: Any, start: Any, **extra: Any) -> None:
        super().__init__(end, start, **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # julianday() keeps milliseconds: plenty for waits counted in minutes and hours.
        template = "((julianday(%(expressions)s)) * 86400.0)"
        return self.as_sql(
            compiler, connection, template=template, arg_joiner=") - julianday(", **extra_context
        )
