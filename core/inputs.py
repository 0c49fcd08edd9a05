"""What a request carries, read with bounds: numbers, and the dates and times people type into
the console (filters, periods, windows, a delegation's window, a policy's dates).

A number taken from a request (a run number in a search box, a simulation's id in a form, a
rate typed into a field) is ASCII digits only, and not too many of them: str.isdigit() is
also true for '²', which int() refuses (a 500), and int() reads an Arabic-Indic one (U+0661)
as 1, so a look-alike names another row. parse_number is the one reading; NumberField is the
form field built on it.

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
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator

# A bigint has 19 digits: 18 always fit, so a number this long names a row or none.
ID_DIGITS = 18
# What a form field reads before its own limits (min_value, max_value) speak: enough for any
# bound a field sets, few enough that int() never works hard.
FIELD_DIGITS = 30


def parse_number(text: str | None, *, digits: int = ID_DIGITS) -> int | None:
    """A whole number from a request: 1 to `digits` ASCII digits, nothing else (no sign, no
    spaces, no other script's digits); None for anything else."""
    if text is None or not 0 < len(text) <= digits:
        return None
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text)


class NumberField(forms.IntegerField):
    """An IntegerField that reads with parse_number (after an optional minus sign, so that a
    negative value gets min_value's message); Django's own reads any script's digits."""

    def to_python(self, value: Any) -> int | None:
        if value in self.empty_values:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip()
        number = parse_number(text.removeprefix("-"), digits=FIELD_DIGITS)
        if number is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return -number if text.startswith("-") else number


class AsciiDecimalField(forms.DecimalField):
    """A DecimalField that takes ASCII only: Decimal() also reads other scripts' digits."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.isascii():
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


class AsciiFloatField(forms.FloatField):
    """A FloatField that takes ASCII only: float() also reads other scripts' digits."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.isascii():
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


EARLIEST = date(1970, 1, 1)
LATEST = date(2999, 12, 31)
RANGE_MESSAGE = f"Enter a date between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}."
# The same bounds as moments. A time typed with an offset (9999-12-31T23:59-14:00) is, in
# UTC, a moment of year 10000, which PostgreSQL stores and psycopg cannot read back: every
# page and task reading that row would fail. Compared as moments, it is simply too late.
FIRST_MOMENT = datetime.combine(EARLIEST, time.min, UTC)
LAST_MOMENT = datetime.combine(LATEST, time.max, UTC)


def in_calendar(moment: date | datetime) -> bool:
    """Whether a date, or an aware date and time, lies between EARLIEST and LATEST: what a
    service that stores a date someone gave checks (the forms check it first)."""
    if isinstance(moment, datetime):
        return FIRST_MOMENT <= moment <= LAST_MOMENT
    return EARLIEST <= moment <= LATEST


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
            MinValueValidator(FIRST_MOMENT, message=RANGE_MESSAGE),
            MaxValueValidator(LAST_MOMENT, message=RANGE_MESSAGE),
        ]


class BoundedSplitDateTimeField(forms.SplitDateTimeField):
    """The admin's date-and-time pair (a date box and a time box), between EARLIEST and the
    end of LATEST, as BoundedDateTimeField."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators += [
            MinValueValidator(FIRST_MOMENT, message=RANGE_MESSAGE),
            MaxValueValidator(LAST_MOMENT, message=RANGE_MESSAGE),
        ]


def check_window(form: forms.Form, first: str, last: str) -> None:
    """A time window whose start is not after its end (both given, or either missing)."""
    start, end = form.cleaned_data.get(first), form.cleaned_data.get(last)
    if start is not None and end is not None and start > end:
        form.add_error(last, "The end comes before the start.")
