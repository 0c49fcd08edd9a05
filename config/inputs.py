"""Form fields for dates and times people type into the console (filters, periods, windows).

Python's dates end at 9999-12-31 and start at year 1, and the pages do arithmetic on what
they are given (a period's day after, the period before it, week starts): a date near
either end overflows there, far from where it was typed. So a date or time given to the
console lies between EARLIEST and LATEST, which leaves years of room for that arithmetic,
and a value outside is a form error that says so.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator

EARLIEST = date(1970, 1, 1)
LATEST = date(2999, 12, 31)
RANGE_MESSAGE = f"Enter a date between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}."


class BoundedDateField(forms.DateField):
    """A calendar date between EARLIEST and LATEST."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators += [
            MinValueValidator(EARLIEST, message=RANGE_MESSAGE),
            MaxValueValidator(LATEST, message=RANGE_MESSAGE),
        ]


class BoundedDateTimeField(forms.DateTimeField):
    """A date and time (ISO 8601, as a datetime-local input sends it) between EARLIEST and the
    end of LATEST; naive values are in the current time zone, like any DateTimeField's."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators += [
            MinValueValidator(datetime.combine(EARLIEST, time.min, UTC), message=RANGE_MESSAGE),
            MaxValueValidator(datetime.combine(LATEST, time.max, UTC), message=RANGE_MESSAGE),
        ]


def check_window(form: forms.Form, first: str, last: str) -> None:
    """A time window whose start is not after its end (both given, or either missing)."""
    start, end = form.cleaned_data.get(first), form.cleaned_data.get(last)
    if start is not None and end is not None and start > end:
        form.add_error(last, "The end comes before the start.")
