"""Forms of the ops console. Validation of content is the schemas' job; forms carry input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS

from automation.schemas import FieldProblem
from console.forms.text import FreeTextField
from core import limits
from core.inputs import BoundedDateTimeField, NumberField, check_window
from core.keyset import NEWEST, OLDEST, BadCursor, Cursor, parse_cursor
from policy.catalogue import Catalogue

FIELD_PREFIX = "field_"


def business_choices(names: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A catalogue section's names as options a person reads: its label shown, the name sent."""
    return [(name, spec.label) for name, spec in names.items()]


class CorrectionForm(forms.Form):
    """The interpretation of a held run, as a person corrects it: its choices are those of
    the catalogue the correction is judged under (`business`)."""

    category = forms.ChoiceField()
    recommended_route = forms.ChoiceField(label="Route")
    requested_effect = forms.ChoiceField(label="Effect")
    reason_code = forms.CharField(
        max_length=100,
        help_text="A short code for why, as the classifier gives it: words joined by underscores.",
    )
    reason = FreeTextField(
        widget=forms.Textarea(attrs={"rows": 2}), help_text="Why: it goes on the run's record."
    )

    def __init__(
        self,
        *args: Any,
        business: Catalogue,
        field_names: list[str],
        sources: dict[str, str],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        choices: dict[str, Mapping[str, Any]] = {
            "category": business.request_types,
            "recommended_route": business.routes,
            "requested_effect": business.effects,
        }
        for name, names in choices.items():
            cast(forms.ChoiceField, self.fields[name]).choices = business_choices(names)
        self.field_names = field_names
        self.sources = sources
        for name in field_names:
            self.fields[FIELD_PREFIX + name] = forms.CharField(
                label=name.replace("_", " ").capitalize(), required=False, max_length=500
            )
        self.order_fields([name for name in self.fields if name != "reason"] + ["reason"])

    def decision(self) -> dict[str, Any]:
        """What the person entered, shaped as a classifier decision for the schema to judge.

        On a form with errors it is what could be read: an input the form refused is left
        empty, and its own message is already shown (add_problems adds no second one)."""
        data = self.cleaned_data
        return {
            "category": data.get("category", ""),
            "recommended_route": data.get("recommended_route", ""),
            "requested_effect": data.get("requested_effect", ""),
            "reason_code": data.get("reason_code", "").strip(),
            "confidence": 1.0,
            "fields": {
                name: self._field(name, data[FIELD_PREFIX + name].strip())
                for name in self.field_names
                if data.get(FIELD_PREFIX + name, "").strip()
            },
        }

    def _field(self, name: str, value: str) -> dict[str, Any]:
        # A person read it: full confidence; where it came from in the request still holds.
        field: dict[str, Any] = {"value": value, "confidence": 1.0}
        if self.sources.get(name):
            field["source"] = self.sources[name]
        return field

    def add_problems(self, problems: list[FieldProblem]) -> None:
        """Show the schema's complaints against the inputs they are about, in plain words."""
        for problem in problems:
            parts = problem.field.split(".")
            name = FIELD_PREFIX + parts[1] if parts[0] == "fields" and len(parts) > 1 else parts[0]
            message = problem.message
            if "should match pattern" in message or "characters that are not allowed" in message:
                message = "Use only lower-case letters, digits, dots, dashes and underscores."
            if name in self.fields and name in self.errors:
                continue  # the form's own message for this input says it first
            self.add_error(name if name in self.fields else None, message)


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
