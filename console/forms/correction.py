"""The correction form: a run's reading as a person puts it right.

It shows every field of the chosen request type and every parameter of the chosen effect,
found by the reader or not, each with an input of its type (a date picker, an amount with its
currency, an e-mail address, a reference held to its pattern, a text area for free text), so
a person can supply what the reader missed. Changing the type or the effect and pressing "Show
the fields of this type" (`SHOW_FIELDS`; a small script does it on change) shows the fields of
the new choice, with what was typed kept.

The problems of a reading (automation.recovery.services.correction_problems, or the ones a
hold stored) are shown beside what they name: `fields.<name>` beside that field's input,
`params.<name>` beside that parameter (or the input of the one field it is made from), anything
else at the top of the form.

Any page that corrects a reading builds it with `correction_form(run, data)` and renders
`runs/_correction_fields.html` inside its own <form> with its own submit button.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, cast

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import QueryDict

from automation.extraction import CURRENCIES, parse_amount, parse_date
from automation.models import Run
from automation.recovery.selectors import current_reading
from automation.runs.parameters import effect_parameters
from automation.runs.payloads import policy_for
from automation.schemas import ExtractedField, FieldProblem
from console.forms.ops import business_choices
from console.forms.text import FreeTextField
from console.templatetags.lists import field_words
from console.vocabulary import humanize
from policy.catalogue import Catalogue, FieldSpec, FieldType, ParameterSpec, template_names

FIELD_PREFIX = "field_"
# The name of the submit that shows the fields of the chosen type and effect, saving nothing.
SHOW_FIELDS = "show_fields"
# The choices the page was shown with (hidden, `shown_category`...): what the person changed.
SHOWN = "shown_"
# What a reading's field value may hold (automation.schemas.ExtractedField).
MAX_VALUE = next(
    int(limit.max_length)
    for limit in ExtractedField.model_fields["value"].metadata
    if hasattr(limit, "max_length")
)
CURRENCY_CHOICES = [("", "Currency"), *((code, code) for code in sorted(CURRENCIES))]
CHOSEN = ("category", "recommended_route", "requested_effect", "reason_code")


# --- what the form shows --------------------------------------------------------------------


@dataclass(frozen=True)
class ReadingInput:
    """One field of the reading, as its input shows it. `type` None: a field the reader found
    that neither the chosen type nor the chosen effect names (shown as plain text)."""

    name: str
    label: str
    type: FieldType | None
    required: bool = False
    description: str = ""
    pattern: str | None = None
    found: str = ""  # the value as the reader wrote it
    source: str = ""  # the words of the request it was read from

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name


@dataclass(frozen=True)
class ParameterRow:
    """One parameter of the chosen effect: corrected through the input of the one field its
    template reads (`through`), or made from something else and shown read-only."""

    name: str
    label: str
    required: bool
    through: str | None

    @property
    def key(self) -> str:
        return f"params.{self.name}"


@dataclass(frozen=True)
class CorrectionLayout:
    category: str
    effect: str
    inputs: list[ReadingInput]
    parameters: list[ParameterRow]


def field_read(parameter: ParameterSpec) -> str | None:
    """The field a person corrects a parameter through: the one its template reads, if it reads
    exactly one (as automation.runs.parameters names the parameter's problems)."""
    read = {key for root, key in template_names(parameter.value) if root == "fields" and key}
    return read.pop() if len(read) == 1 else None


def found_fields(reading: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The reading's fields as (value, source), whatever shape an unusable reading had."""
    fields = reading.get("fields")
    if not isinstance(fields, dict):
        return {}
    found = {}
    for name, field in fields.items():
        value = field.get("value") if isinstance(field, dict) else field
        source = field.get("source") if isinstance(field, dict) else ""
        found[str(name)] = ("" if value is None else str(value), str(source or ""))
    return found


def correction_layout(
    business: Catalogue, category: str, effect: str, found: Mapping[str, tuple[str, str]]
) -> CorrectionLayout:
    """The inputs for a reading of type `category` asking for `effect`: the type's fields, in
    the catalogue's order, then the fields the effect's parameters read, then whatever else
    the reader found."""
    declared = business.request_types.get(category)
    inputs = {
        name: _input(name, spec.label or humanize(name), spec, found)
        for name, spec in (declared.fields.items() if declared is not None else [])
    }
    rows = []
    spec = business.effects.get(effect)
    for name, parameter in (spec.parameters if spec is not None else {}).items():
        read = field_read(parameter)
        rows.append(ParameterRow(name, humanize(name), parameter.required, read))
        if read is None:
            continue
        if read in inputs:
            inputs[read] = replace(
                inputs[read], required=inputs[read].required or parameter.required
            )
        else:
            inputs[read] = _input(read, _label(business, read), parameter, found)
    for name in sorted(set(found) - set(inputs)):
        inputs[name] = ReadingInput(name, humanize(name), None, found=found[name][0])
    return CorrectionLayout(category, effect, list(inputs.values()), rows)


def _input(
    name: str, label: str, spec: FieldSpec | ParameterSpec, found: Mapping[str, tuple[str, str]]
) -> ReadingInput:
    value, source = found.get(name, ("", ""))
    return ReadingInput(
        name=name,
        label=label,
        type=spec.type,
        required=spec.required,
        description=spec.description if isinstance(spec, FieldSpec) else "",
        pattern=spec.pattern if spec.type == FieldType.REFERENCE else None,
        found=value,
        source=source,
    )


def _label(business: Catalogue, name: str) -> str:
    """A field's label where some type of the catalogue gives one, else its name in words."""
    for request_type in business.request_types.values():
        spec = request_type.fields.get(name)
        if spec is not None and spec.label:
            return spec.label
    return humanize(name)


# --- the inputs, by type -----------------------------------------------------------------


class ReadingDateInput(forms.DateInput):
    """A date picker; a date the reader wrote in words is shown as the ISO date it means."""

    input_type = "date"

    def format_value(self, value: Any) -> str | None:
        if isinstance(value, str) and value:
            try:
                return parse_date(value).isoformat()
            except ValueError:
                return value
        return cast(str | None, super().format_value(value))


class ReadingDateField(forms.CharField):
    """A date, stored in the reading as ISO (2026-12-03)."""

    widget = ReadingDateInput

    def to_python(self, value: Any) -> str:
        text = cast(str, super().to_python(value))
        if not text:
            return ""
        try:
            return parse_date(text).isoformat()
        except ValueError:
            raise forms.ValidationError(
                f"“{text}” is not a date: choose one (2026-12-03)."
            ) from None


class AmountInput(forms.MultiWidget):
    """A number and its currency, side by side; the label points at the number."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        number = forms.NumberInput(attrs={"step": "0.01", "min": "0", "inputmode": "decimal"})
        currency = forms.Select(choices=CURRENCY_CHOICES)
        super().__init__({"": number, "currency": currency}, attrs)

    def decompress(self, value: Any) -> list[str]:
        try:
            number, currency = parse_amount(str(value or ""))
        except ValueError:
            return ["", ""]
        return [str(number), currency or ""]

    def id_for_label(self, id_: str) -> str:
        return f"{id_}_0" if id_ else ""


class AmountField(forms.MultiValueField):
    """An amount, stored in the reading as the reader writes one: `1250.00 EUR`."""

    widget = AmountInput

    def __init__(self, **kwargs: Any) -> None:
        parts = (
            forms.DecimalField(required=False, min_value=0, max_digits=15, decimal_places=2),
            forms.ChoiceField(required=False, choices=CURRENCY_CHOICES),
        )
        super().__init__(parts, require_all_fields=False, **kwargs)

    def compress(self, data_list: list[Any]) -> str:
        number, currency = [*data_list, None, None][:2]
        if number is None:
            return ""  # no number: no amount, whatever currency is chosen
        if not currency:
            raise forms.ValidationError("Choose the amount's currency.")
        return f"{cast(Decimal, number):.2f} {currency}"


class ReferenceField(forms.CharField):
    """A reference, held to its pattern (matched in full) when the catalogue gives one."""

    def __init__(self, *, pattern: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pattern = pattern
        if pattern:
            self.widget.attrs["pattern"] = pattern

    def validate(self, value: Any) -> None:
        super().validate(value)
        if value and self.pattern and not re.fullmatch(self.pattern, value):
            raise forms.ValidationError(
                f"“{value}” does not look like a {str(self.label).lower()}: it is written "
                f"like {self.pattern}."
            )


def reading_field(spec: ReadingInput) -> forms.Field:
    """The form field of an input of the spec's type. None is required here: whether a value
    is needed is the correction's check (CorrectionForm.judge)."""
    common: dict[str, Any] = {"label": spec.label, "required": False, "help_text": spec.description}
    if spec.type == FieldType.DATE:
        return ReadingDateField(max_length=MAX_VALUE, **common)
    if spec.type == FieldType.AMOUNT:
        field = AmountField(**common)
        cast(AmountInput, field.widget).widgets[1].attrs["aria-label"] = f"{spec.label}: currency"
        return field
    if spec.type == FieldType.EMAIL:
        return forms.EmailField(max_length=MAX_VALUE, **common)
    if spec.type == FieldType.REFERENCE:
        return ReferenceField(pattern=spec.pattern, max_length=MAX_VALUE, **common)
    if spec.type == FieldType.TEXT:
        return forms.CharField(
            max_length=MAX_VALUE, widget=forms.Textarea(attrs={"rows": 3}), **common
        )
    return forms.CharField(max_length=MAX_VALUE, **common)


def unreadable_note(spec: ReadingInput) -> str:
    """What to say when the input cannot show the value the reader found (a date that is
    none, an amount without a number), so the person sees what was read."""
    if not spec.found or spec.type not in (FieldType.DATE, FieldType.AMOUNT):
        return ""
    try:
        parse_date(spec.found) if spec.type == FieldType.DATE else parse_amount(spec.found)
    except ValueError:
        return f"The reader found “{spec.found}”, which this input cannot take: enter it again."
    return ""


# --- the form ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputRow:
    field: forms.BoundField
    spec: ReadingInput
    messages: list[str]
    note: str


@dataclass(frozen=True)
class ParameterShown:
    row: ParameterRow
    through_label: str  # the label of the input it is corrected through, or ""
    value: str  # a read-only parameter's value as the reading makes it
    messages: list[str]


class CorrectionForm(forms.Form):
    """The interpretation of a run, as a person corrects it: its choices are those of the
    catalogue the correction is judged under (`business`), its inputs those of `layout`."""

    category = forms.ChoiceField(label="Request type")
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
        run: Run,
        business: Catalogue,
        layout: CorrectionLayout,
        carried: dict[str, str] | None = None,
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
        self.run = run
        self.business = business
        self.layout = layout
        # What was typed for fields the chosen type no longer shows: sent along, hidden, so
        # choosing the type again brings it back. Never part of the reading.
        self.carried = carried or {}
        self.beside: dict[str, list[str]] = {}  # an input's or a parameter's problems
        self.top: list[str] = []  # problems about nothing shown
        self.showing = False  # shown again for another choice (SHOW_FIELDS), nothing saved
        for spec in layout.inputs:
            self.fields[spec.input_name] = reading_field(spec)
        self.order_fields([*CHOSEN, *(spec.input_name for spec in layout.inputs), "reason"])

    # --- what the person entered

    def decision(self) -> dict[str, Any]:
        """What the person entered, shaped as a classifier decision for the schema to judge.

        On a form with errors it is what could be read: an input the form refused is left
        empty, and its own message is already shown (judge adds no second one)."""
        data = self.cleaned_data
        fields = {}
        for spec in self.layout.inputs:
            value = str(data.get(spec.input_name) or "").strip()
            if value:
                fields[spec.name] = self._field(spec, value)
        return {
            "category": data.get("category", ""),
            "recommended_route": data.get("recommended_route", ""),
            "requested_effect": data.get("requested_effect", ""),
            "reason_code": data.get("reason_code", "").strip(),
            "confidence": 1.0,
            "fields": fields,
        }

    def _field(self, spec: ReadingInput, value: str) -> dict[str, Any]:
        # A person read it: full confidence; where it came from in the request still holds.
        field: dict[str, Any] = {"value": value, "confidence": 1.0}
        if spec.source:
            field["source"] = spec.source
        return field

    # --- problems

    def judge(self, problems: list[FieldProblem]) -> bool:
        """Show the correction's problems beside what they name, then a needed field left
        empty; True when nothing is wrong (it may be saved)."""
        self.add_problems(problems)
        for spec in self.layout.inputs:
            if spec.required and not self._entered(spec) and not self.errors.get(spec.input_name):
                self.add_error(spec.input_name, "Needed: enter it.")
        return not self.errors and not self.beside and not self.top

    def _entered(self, spec: ReadingInput) -> bool:
        return bool(str(self.cleaned_data.get(spec.input_name) or "").strip())

    def add_problems(self, problems: list[FieldProblem]) -> None:
        """Show problems against the inputs they are about, in plain words. On a bound form an
        input's own message (a date that is none) says it first; on an unbound one (a held
        run's stored problems) they are shown beside the inputs."""
        own = set(self.errors) if self.is_bound else set()
        for problem in problems:
            where = self._place_of(problem.field)
            message = _plain(problem.message)
            if where is None:
                words = self._words(problem.field)
                self._show(None, f"{words}: {message}" if words else message)
            elif where not in own:
                self._show(where, message)

    def _show(self, where: str | None, message: str) -> None:
        if self.is_bound and (where is None or where in self.fields):
            if message not in self.errors.get(where or NON_FIELD_ERRORS, []):
                self.add_error(where, message)
            return
        shown = self.top if where is None else self.beside.setdefault(where, [])
        if message not in shown:
            shown.append(message)

    def _place_of(self, field: str) -> str | None:
        """The input (or the parameter) a problem's field names, or None: the top."""
        root, _, rest = field.partition(".")
        name = rest.split(".")[0]
        if root == "fields" and FIELD_PREFIX + name in self.fields:
            return FIELD_PREFIX + name
        if root == "params":
            for row in self.layout.parameters:
                if row.name == name and row.through and FIELD_PREFIX + row.through in self.fields:
                    return FIELD_PREFIX + row.through
                if row.name == name:
                    return row.key
        if not rest and root in self.fields:
            return root
        return None

    def _words(self, field: str) -> str:
        """What a problem shown at the top is about, in words (an effect by its label)."""
        root, _, name = field.partition(".")
        spec = self.business.effects.get(name) if root == "effects" else None
        if spec is not None:
            return spec.label
        return field_words(field) if field else ""

    def shown(self) -> dict[str, str]:
        """The choices this page shows, sent back hidden (SHOWN) with the next post."""
        return {SHOWN + name: str(self[name].value() or "") for name in CHOSEN[:3]}

    def problems_shown_at_top(self) -> list[str]:
        if self.is_bound:
            return [str(error) for error in self.non_field_errors()]
        return self.top

    # --- what the template shows

    @property
    def category_label(self) -> str:
        spec = self.business.request_types.get(self.layout.category)
        return spec.label if spec is not None else self.layout.category

    @property
    def effect_label(self) -> str:
        spec = self.business.effects.get(self.layout.effect)
        return spec.label if spec is not None else self.layout.effect

    def choice_rows(self) -> list[InputRow]:
        return [self._row(name, None) for name in CHOSEN]

    def reading_rows(self) -> list[InputRow]:
        return [self._row(spec.input_name, spec) for spec in self.layout.inputs]

    def reason_row(self) -> InputRow:
        return self._row("reason", None)

    def _row(self, name: str, spec: ReadingInput | None) -> InputRow:
        field = self[name]
        messages = [str(e) for e in field.errors] if self.is_bound else self.beside.get(name, [])
        note = unreadable_note(spec) if spec is not None else ""
        return InputRow(field, spec or ReadingInput(name, str(field.label), None), messages, note)

    def parameter_rows(self) -> list[ParameterShown]:
        labels = {spec.name: spec.label for spec in self.layout.inputs}
        values = self._parameter_values()
        return [
            ParameterShown(
                row=row,
                through_label=labels.get(row.through or "", ""),
                value=values.get(row.name, ""),
                messages=self.beside.get(row.key, []),
            )
            for row in self.layout.parameters
        ]

    def _parameter_values(self) -> dict[str, str]:
        """The read-only parameters' values, as the reading shown makes them."""
        if not any(row.through is None for row in self.layout.parameters):
            return {}
        if self.is_bound and hasattr(self, "cleaned_data"):
            reading = self.decision()
        else:
            reading = {
                "category": self.layout.category,
                "requested_effect": self.layout.effect,
                "recommended_route": self.initial.get("recommended_route", ""),
                "fields": {spec.name: {"value": spec.found} for spec in self.layout.inputs},
            }
        return effect_parameters(self.business, self.layout.effect, self.run, reading).values

    def typed(self) -> dict[str, Any]:
        """What the inputs hold as typed (a bound form's data, before any check)."""
        return {field.name: field.data for field in self}

    def unshown(self, data: QueryDict) -> dict[str, str]:
        """The posted field values this form has no input for (another type's fields)."""
        read = set()
        for spec in self.layout.inputs:
            widget = self.fields[spec.input_name].widget
            names = getattr(widget, "widgets_names", [""])
            read |= {spec.input_name + suffix for suffix in names}
        posted = {key: str(data.get(key) or "") for key in data if key.startswith(FIELD_PREFIX)}
        return {key: value for key, value in posted.items() if key not in read and value}


def _plain(message: str) -> str:
    if "should match pattern" in message or "characters that are not allowed" in message:
        return "Use only lower-case letters, digits, dots, dashes and underscores."
    return message


# --- building it for a run ---------------------------------------------------------------


def correction_form(run: Run, data: QueryDict | None) -> CorrectionForm:
    """The correction form of `run` under the catalogue its correction is judged by
    (policy_for, as correction_problems judges it), prefilled from its current reading and
    bound to `data` (a POST), except when `data` only asks to show the fields of the chosen
    type and effect: then it is unbound again, with what was typed as its values."""
    document = policy_for(run).parsed
    business = document.business
    reading = current_reading(run)
    found = found_fields(reading)
    initial: dict[str, Any] = {key: reading.get(key) for key in CHOSEN}
    initial |= {FIELD_PREFIX + name: value for name, (value, _) in found.items()}
    category = _chosen(data, initial, "category", business.request_types)
    effect = _chosen(data, initial, "requested_effect", business.effects)
    showing = data is not None and SHOW_FIELDS in data
    follows = {}
    if showing and data is not None and _type_changed_alone(data, category):
        # Only the type was changed: its own effect and route come with it, as a reader's.
        effect = business.request_types[category].default_effect or effect
        follows = {"requested_effect": effect, "recommended_route": document.routes.get(category)}
    layout = correction_layout(business, category, effect, found)
    form = CorrectionForm(data, initial=initial, run=run, business=business, layout=layout)
    if showing and data is not None:
        typed = form.typed() | {k: v for k, v in follows.items() if v}
        form = CorrectionForm(
            initial=typed, run=run, business=business, layout=layout, carried=form.unshown(data)
        )
        form.showing = True
    return form


def _type_changed_alone(data: QueryDict, category: str) -> bool:
    """The type differs from the one the page showed, and the effect and route do not."""
    return data.get(SHOWN + "category") != category and all(
        data.get(name) == data.get(SHOWN + name)
        for name in ("requested_effect", "recommended_route")
    )


def _chosen(
    data: QueryDict | None, initial: dict[str, Any], name: str, names: Mapping[str, Any]
) -> str:
    """The type (or effect) whose fields to show: the one chosen, else the reading's; one the
    catalogue lacks shows as its first (what the browser selects)."""
    chosen = data.get(name) if data is not None else initial.get(name)
    if chosen in names:
        return str(chosen)
    if initial.get(name) in names:
        return str(initial[name])
    return next(iter(names))
