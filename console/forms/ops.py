"""Forms of the ops console. Validation of content is the schemas' job; forms carry input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS

from console.forms.text import FreeTextField
from core import limits
from core.inputs import BoundedDateTimeField, NumberField, check_window
from core.keyset import NEWEST, OLDEST, BadCursor, Cursor, parse_cursor


def business_choices(names: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A catalogue section's names as options a person reads: its label shown, the name sent."""
    return [(name, spec.label) for name, spec in names.items()]


class RecoveryForm(forms.Form):
    """What the run page's recovery buttons send (the inputs are console/templates/
    runs/run.html and runs/preview.html; their limits are these, from core.limits)."""

    reason = FreeTextField()
    evidence = FreeTextField(required=False, max_length=limits.EVIDENCE)


class BatchForm(forms.Form):
    action = forms.ChoiceField(
        choices=[
            ("retry", "Retry the failed step"),
            ("replay", "Replay under today's policy"),
        ]
    )
    since = BoundedDateTimeField()
    until = BoundedDateTimeField()
    reason = FreeTextField()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        check_window(self, "since", "until")
        return data


class CursorField(forms.CharField):
    """A keyset page position from a next or previous link (core.keyset)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=40, **kwargs)

    def clean(self, value: Any) -> Cursor | None:
        text = super().clean(value)
        if not text:
            return None
        try:
            return parse_cursor(text)
        except BadCursor as exc:
            raise forms.ValidationError(
                "Not a page position from this page's links: the first page is shown."
            ) from exc


# Longest look-back a queue filter takes: a century, far beyond any run, well inside dates.
MAX_AGE_HOURS = 24 * 366 * 100


class WindowForm(forms.Form):
    """A window of time, either end open; an end before its start is refused."""

    since = BoundedDateTimeField(required=False, label="From")
    until = BoundedDateTimeField(required=False, label="To")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        check_window(self, "since", "until")
        return data


class QueueFilterForm(WindowForm):
    """A queue's filters, from the query string. A filter whose value is unusable is left out
    (the page says which and why), so a bad link still shows the queue."""

    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        help_text="an exact event id, Message-ID, fingerprint or customer reference",
    )
    route = forms.CharField(required=False, max_length=100, label="Route")
    owner = forms.CharField(required=False, max_length=150, label="Owner")
    older_than_hours = NumberField(
        required=False, min_value=0, max_value=MAX_AGE_HOURS, label="Older than (hours)"
    )
    after = CursorField(required=False, label="Page")
    before = CursorField(required=False, label="Page")
    order = forms.ChoiceField(
        required=False,
        choices=[(OLDEST, "Held longest first"), (NEWEST, "Most recently held first")],
        label="Order",
    )
    field_order = ["q", "route", "owner", "older_than_hours", "since", "until"]  # as shown

    def value(self, name: str) -> Any:
        """The field's cleaned value, or None when it was missing or unusable."""
        if name in self.errors:
            return None
        return self.cleaned_data.get(name)


# Highest delivery rate an operator can set: beyond it a cap means nothing.
MAX_RATE_PER_MINUTE = 100_000


class EffectResumeForm(forms.Form):
    """Resume deliveries, at most `rate` per minute (empty: no cap)."""

    rate = NumberField(
        required=False, min_value=1, max_value=MAX_RATE_PER_MINUTE, label="Rate per minute"
    )


class SimulationForm(WindowForm):
    """The window of past runs a simulation judges (each end defaults on the page)."""


def form_problems(form: forms.Form) -> str:
    """A form's errors as one line for a message: `Label: what is wrong.` per field."""
    parts = []
    for name, errors in form.errors.items():
        field = form.fields.get(name)
        label = (field.label if field is not None else None) or name.replace("_", " ").capitalize()
        prefix = "" if name == NON_FIELD_ERRORS else f"{label}: "
        parts.append(prefix + " ".join(str(error) for error in errors))
    return " ".join(parts)
