"""SQL pieces the reports need and Django lacks: percentiles and the seconds between two times.

PostgreSQL computes percentiles itself (`percentile_cont ... WITHIN GROUP`), so the rows
never leave the database: a report asks for numbers, not for durations. `percentile_cont`
here is the same definition (linear interpolation between the closest ranks) for values
already in hand, such as the buckets of a histogram.
"""

from __future__ import annotations

import math
from typing import Any

from django.db.models import Aggregate, FloatField, Func


def percentile_cont(ordered: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont over sorted values: interpolate at (n - 1) * fraction."""
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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


class Seconds(Func):
    """Seconds from `start` to `end` (two datetime expressions), as a float."""

    output_field = FloatField()
    arity = 2
    template = "EXTRACT(EPOCH FROM (%(expressions)s))::double precision"
    arg_joiner = " - "

    def __init__(self, end: Any, start: Any, **extra: Any) -> None:
        super().__init__(end, start, **extra)
