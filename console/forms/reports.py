"""The dashboard's period: a preset (the last 7, 30 or 90 days) or two dates."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from core.inputs import BoundedDateField
from reports.selectors import Period

PRESETS = {"7d": 7, "30d": 30, "90d": 90}
DEFAULT_PRESET = "30d"
LONGEST = timedelta(days=366)


def start_of(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


class PeriodForm(forms.Form):
    """`?period=7d` ends now; `?from=2026-02-01&to=2026-02-28` covers both days (UTC)."""

    period = forms.ChoiceField(
        choices=[(key, f"Last {days} days") for key, days in PRESETS.items()], required=False
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # `from` is a Python keyword, so these two fields cannot be class attributes.
        # Bounded: the period's end (the day after `to`) and the period before it are computed.
        self.fields["from"] = BoundedDateField(required=False, label="From")
        self.fields["to"] = BoundedDateField(required=False, label="To")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        first, last = data.get("from"), data.get("to")
        if (first is None) != (last is None):
            raise forms.ValidationError("Give both dates, or choose one of the periods.")
        if first is not None and last is not None:
            if first > last:
                raise forms.ValidationError("The first date comes after the last one.")
            if last - first >= LONGEST:
                raise forms.ValidationError("Choose at most a year.")
        return data

    def to_period(self, now: datetime) -> Period:
        """The chosen period; the default (the last 30 days) when nothing valid was chosen."""
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        if data.get("from") is not None:
            return Period(start_of(data["from"]), start_of(data["to"]) + timedelta(days=1))
        days = PRESETS[data.get("period") or DEFAULT_PRESET]
        return Period(now - timedelta(days=days), now)

    @property
    def preset(self) -> str:
        """The preset in use ('' for explicit dates)."""
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        if data.get("from") is not None:
            return ""
        return str(data.get("period") or DEFAULT_PRESET)
