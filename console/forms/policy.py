"""The policy editor: a form for the changes an ops lead makes most, and the YAML for the rest.

The form starts from a base version's document. Saving applies the fields to a copy of that
document and lets the schema (policy.schemas.PolicyDocument) judge the result, so the form
and the YAML are held to the same rules. What the schema refuses is shown next to the field
it is about, in plain words (`plain_problem`), never as pydantic's or the YAML parser's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml
from django import forms
from django.contrib.auth.models import Group
from django.forms import BoundField
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from console.forms.text import FreeTextField
from console.vocabulary import Kind, humanize, label, tier_term
from core.errors import plain_message
from core.inputs import AsciiDecimalField, AsciiFloatField, BoundedDateField, NumberField
from policy.models import PolicyVersion
from policy.schemas import (
    MAX_PHRASE_CHARS,
    MAX_PHRASES,
    NEW_VERSION,
    ApprovalRule,
    PolicyDocument,
    SignalAction,
)
from policy.services import POLICY_WORDS, PolicyError, parse_policy_text

Path = tuple[str | int, ...]

LANGUAGES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "nl": "Dutch",
    "it": "Italian",
}
# A signal's phrases in one language, one a line: as many as the schema allows in all.
PHRASES_TEXT_LIMIT = MAX_PHRASES * (MAX_PHRASE_CHARS + 1)
PHRASES_HELP = (
    f"One phrase per line, each of at most {MAX_PHRASE_CHARS} characters; a message "
    "containing any of them matches."
)
SIGNAL_ACTIONS = [
    (SignalAction.HOLD.value, "Hold the run for a person to read first"),
    (SignalAction.APPROVAL.value, "Let it go ahead only after an approver agrees"),
    (SignalAction.BLOCK.value, "Stop it: nothing happens"),
]
AMOUNT_APPROVAL = "amount_approval"  # the approval row of amounts over a tier's limit
RULE_DEFAULTS = ApprovalRule(group="-")  # the numbers a new approval starts with
APPROVAL_FIELDS = ("group", "approvers", "expires", "escalate_after", "escalate_to", "bulk")

# The schema's own refusals (policy.schemas), said the way a person filling the form reads them,
# each with the part of the document it is about (a model's check names the model only).
OWN_WORDS: dict[str, tuple[Path, str]] = {
    "block_above must not be below approval_above": (
        ("block_above",),
        "must not be below the amount that needs approval",
    ),
    "a signal needs at least one phrase or pattern": (
        ("phrases",),
        "give the signal at least one phrase, or switch it off",
    ),
    "a signal has `approval` (who approves) exactly when its action is approval": (
        ("approval",),
        "choose who approves: the signal lets a run go ahead only after an approver agrees",
    ),
    "amount_limits with approval_above need amount_approval": (
        ("amount_approval",),
        "amounts over a tier's approval limit need someone to approve them: choose a group",
    ),
}


def _own(error: ErrorDetails) -> tuple[Path, str] | None:
    if error["type"] != "value_error":
        return None
    text = str((error.get("ctx") or {}).get("error", ""))
    return next((found for own, found in OWN_WORDS.items() if text.startswith(own)), ((), text))


def problem_path(error: ErrorDetails) -> Path:
    """Where in the document a problem is: pydantic's location, made precise for the
    schema's own checks (which name only the model they belong to)."""
    own = _own(error)
    return (*error["loc"], *(own[0] if own else ()))


def plain_problem(error: ErrorDetails) -> str:
    """What is wrong with one value, in words a person reads (no pydantic wording): the
    schema's own refusals in the editor's words, the rest as core.errors words them for a
    policy document. The value is not repeated: it is in the field the message is shown at,
    or at the place in the YAML the message names."""
    own = _own(error)
    if own is not None:
        return own[1]
    message = plain_message(error, words=POLICY_WORDS, say_input=False)
    where, entry = error["loc"], error.get("input")
    if where and isinstance(where[-1], int) and isinstance(entry, str):
        message = f"“{entry[:60]}” {message}"  # an entry of a list: say which one
    return message


def place_in_words(path: Path) -> str:
    """`signals.legal_threat.phrases.en.3` → "Signals > Legal threat > Phrases > En > entry 4"."""
    parts = [f"entry {part + 1}" if isinstance(part, int) else humanize(part) for part in path]
    return " > ".join(part for part in parts if part != "[key]") or "The document"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: where in words, the key path as code, what is wrong."""

    place: str
    path: str
    message: str


def document_problems(exc: PolicyError) -> list[Problem]:
    """Why a YAML document was refused, in plain words, each with the place it is about."""
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        return [
            Problem(
                place_in_words(problem_path(error)),
                ".".join(str(part) for part in problem_path(error)),
                plain_problem(error),
            )
            for error in cause.errors()
        ]
    if isinstance(cause, yaml.YAMLError):
        return [Problem("The YAML", "", yaml_problem(cause))]
    if isinstance(cause, ValueError | OverflowError):
        return [
            Problem(
                "A value",
                "",
                "check the dates and numbers: a value cannot be read when it does not "
                "exist, such as the date 2026-02-30",
            )
        ]
    return [Problem("The document", "", exc.message)]


# What the parser found, in words; True where the line that matters is where it started
# (a bracket or quote opened and never closed), not where the parser gave up.
YAML_HINTS = [
    ("found character '\\t'", "a tab is used for indentation: indent with spaces", False),
    ("mapping values are not allowed", "a colon where none belongs: quote text with ': '", False),
    (
        "could not find expected ':'",
        "a line has no colon: write each setting as name: value",
        False,
    ),
    ("expected <block end>", "the indentation does not line up with the lines above", False),
    ("while parsing a flow", "a bracket [ or { is opened and never closed", True),
    ("while scanning a quoted", "a quote is opened and never closed", True),
]
UNREADABLE = ("the text cannot be read: check the indentation, colons, brackets and quotes", False)


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML syntax error as words with its line number (the parser's text is not shown)."""
    raw = str(error)
    hint, at_start = next(((w, s) for found, w, s in YAML_HINTS if found in raw), UNREADABLE)
    marks = [getattr(error, "problem_mark", None), getattr(error, "context_mark", None)]
    mark = marks[1] if at_start and marks[1] is not None else marks[0] or marks[1]
    where = f"on line {mark.line + 1}, " if mark is not None else ""
    return f"This is not valid YAML: {where}{hint}."


# --- the form ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalRow:
    code: str
    label: str
    group: BoundField
    approvers: BoundField
    expires: BoundField
    escalate_after: BoundField
    escalate_to: BoundField
    bulk: BoundField


@dataclass(frozen=True)
class SignalRow:
    code: str
    label: str
    description: str
    doing: str  # what a hit does to a run, in the base version
    enabled: BoundField
    action: BoundField
    approval_group: BoundField
    phrases: list[BoundField]

    @property
    def has_errors(self) -> bool:
        fields = [self.enabled, self.action, self.approval_group, *self.phrases]
        return any(field.errors for field in fields)


def lines(text: str) -> list[str]:
    """One phrase per line, blank lines dropped (a repeat is kept: the base may have one, and
    an unchanged signal must stay the same)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def deciding_groups() -> set[str]:
    """The groups whose members may decide approvals: only they can approve or take
    escalations."""
    return set(
        Group.objects.filter(
            permissions__content_type__app_label="approvals",
            permissions__codename="decide_approvalrequest",
        ).values_list("name", flat=True)
    )


def group_choices(groups: set[str], blank: str, keep: set[str]) -> list[tuple[str, str]]:
    """`groups` in words, and the ones the base document names that are not among them
    (said so, so that keeping one is a choice)."""
    named = {name for name in keep if name}
    choices = [(name, label(Kind.GROUP, name)) for name in sorted(groups)]
    choices += [
        (name, f"{label(Kind.GROUP, name)} (cannot decide approvals)")
        for name in sorted(named - groups)
    ]
    return [("", blank), *choices]


class ProblemsAtFields(forms.Form):
    """A form that builds a document: each problem the schema finds is shown at the field
    that `places` gives for its place in the document."""

    places: dict[Path, str]

    def add_problem(self, path: Path, message: str) -> None:
        """Show a problem at the field for `path` (the longest part of it that has one)."""
        for end in range(len(path), -1, -1):
            field = self.places.get(tuple(path[:end]))
            if field is not None:
                self.add_error(field, self.said_at(path[end:], message))
                return
        self.add_error(None, f"{place_in_words(path)}: {message}")

    def said_at(self, rest: Path, message: str) -> str:
        """The message shown at a field; `rest` is the part of the place the field does not
        name itself."""
        return sentence(message)


class NewVersionForm(ProblemsAtFields):
    """A form that saves a new version from a base: the base, the new name and the note."""

    base = forms.CharField(widget=forms.HiddenInput)
    version = forms.CharField(
        label="Version name",
        max_length=100,
        help_text="A new name, such as policy-2. Every run this version decides carries it.",
    )
    note = FreeTextField(
        label="What changes and why",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One or two sentences for whoever reads the version list later.",
    )


RATE_LINE = re.compile(r"^(?P<currency>[A-Za-z]{3})\s*[:=]?\s*(?P<rate>[0-9]+(?:\.[0-9]+)?)$")
RATES_HELP = (
    "One currency a line: its three-letter code and what one unit of it is worth in the base "
    "currency, with a dot for decimals (SEK 0.0863). An amount in a currency not listed waits "
    "for a person."
)


def rate_lines(text: str) -> dict[str, str]:
    """`SEK 0.0863` lines as {currency: rate}; a line that is not one is refused in words."""
    rates: dict[str, str] = {}
    for number, line in enumerate(lines(text), start=1):
        match = RATE_LINE.fullmatch(line)
        if match is None:
            raise forms.ValidationError(
                f"Line {number} is not a rate: write a currency code and a number, "
                "such as SEK 0.0863."
            )
        currency = match.group("currency").upper()
        if currency in rates:
            raise forms.ValidationError(f"{currency} has two rates: keep one.")
        rates[currency] = match.group("rate")
    return rates


class PolicyForm(NewVersionForm):
    """The common changes to a policy, applied to `base`'s document (see document())."""

    base_currency = forms.CharField(
        label="Base currency",
        required=False,
        max_length=3,
        help_text=(
            "The currency the amount limits are written in, as its three-letter code (EUR): "
            "every amount is converted into it before a limit judges it. Blank: amounts are "
            "compared as numbers, whatever their currency."
        ),
    )
    rates_as_of = BoundedDateField(
        label="Rates as of",
        required=False,
        help_text="The day the rates were taken, as 2026-12-01.",
    )
    rates = forms.CharField(
        label="Rates",
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text=RATES_HELP,
    )
    confidence_default = AsciiFloatField(
        label="Every category",
        help_text=(
            "How sure a reading must be, from 0 to 1, to go ahead without a person "
            "(0.8 means 80% sure). 0 lets every reading through."
        ),
    )

    def __init__(self, *args: Any, base: PolicyVersion, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_version = base
        self.base_document = base.parsed
        self.groups = deciding_groups()
        self.fields["base"].initial = base.name
        # Which field shows the problems of each place in the document (add_problem).
        self.places: dict[Path, str] = {("version",): "version", ("note",): "note"}
        self.places[("confidence", "default")] = "confidence_default"
        self.places[("confidence",)] = "confidence_default"
        self.fields["confidence_default"].initial = self.base_document.confidence.default
        self._add_money()
        # The request types and tiers are those of the version's own catalogue.
        self.business = self.base_document.business
        self.category_fields = [self[name] for name in self._add_categories()]
        self.tier_rows = [
            (tier_term(self.business, tier).label, [self[n] for n in names])
            for tier, names in self._add_tiers()
        ]
        self.approval_rows = [
            self._add_approval(i, key) for i, key in enumerate(self._approval_keys())
        ]
        self.signal_rows = [
            self._add_signal(i, name) for i, name in enumerate(self.base_document.signals)
        ]

    # --- fields, built from the base document ---

    def group_choices(self, blank: str, keep: set[str]) -> list[tuple[str, str]]:
        """The groups that may decide approvals, in words, and the one the base document
        names if it no longer may (said so, so that keeping it is a choice)."""
        return group_choices(self.groups, blank, keep)

    def _add_money(self) -> None:
        money = self.base_document.money
        if money is not None:
            self.fields["base_currency"].initial = money.base_currency
            self.fields["rates_as_of"].initial = money.rates_as_of
            self.fields["rates"].initial = "\n".join(
                f"{currency} {rate}" for currency, rate in sorted(money.rates.items())
            )
        self.places[("money",)] = "base_currency"
        for name in ("base_currency", "rates_as_of", "rates"):
            self.places[("money", name)] = name

    def clean_rates(self) -> dict[str, str]:
        return rate_lines(self.cleaned_data.get("rates") or "")

    def clean(self) -> dict[str, Any]:
        values = super().clean() or {}
        # Rates without a base currency would silently do nothing.
        if values.get("rates") and not (values.get("base_currency") or "").strip():
            self.add_error("base_currency", "Give the base currency the rates convert into.")
        return values

    def _money(self, values: dict[str, Any]) -> dict[str, Any] | None:
        """The money section: none without a base currency."""
        currency = (values.get("base_currency") or "").strip().upper()
        if not currency:
            return None
        when = values.get("rates_as_of")
        return {
            "base_currency": currency,
            "rates_as_of": when.isoformat() if when else None,
            "rates": values.get("rates") or {},
        }

    def _add_categories(self) -> list[str]:
        thresholds = self.base_document.confidence.per_category
        self.categories = list(dict.fromkeys([*self.business.request_types, *thresholds]))
        names = []
        for i, category in enumerate(self.categories):
            name = f"confidence-{i}"
            known = self.business.request_types.get(category)
            self.fields[name] = AsciiFloatField(
                label=known.label if known is not None else label(Kind.CATEGORY, category),
                required=False,
                initial=thresholds.get(category),
                help_text="Blank: the threshold for every category applies.",
            )
            self.places[("confidence", "per_category", category)] = name
            names.append(name)
        return names

    def _add_tiers(self) -> list[tuple[str, list[str]]]:
        limits = self.base_document.amount_limits
        self.tiers = list(dict.fromkeys([*self.business.tier_values(), *limits]))
        rows = []
        for i, tier in enumerate(self.tiers):
            limit = limits.get(tier)
            approval, block = f"tier-{i}-approval_above", f"tier-{i}-block_above"
            self.fields[approval] = AsciiDecimalField(
                label="Approval above",
                required=False,
                max_digits=15,
                decimal_places=2,
                initial=limit.approval_above if limit else None,
                help_text="An amount above this waits for an approver. Blank: no limit.",
            )
            self.fields[block] = AsciiDecimalField(
                label="Stop above",
                required=False,
                max_digits=15,
                decimal_places=2,
                initial=limit.block_above if limit else None,
                help_text="An amount above this is refused: nothing happens. Blank: no limit.",
            )
            self.places[("amount_limits", tier, "approval_above")] = approval
            self.places[("amount_limits", tier, "block_above")] = block
            self.places[("amount_limits", tier)] = block  # the check between the two
            rows.append((tier, [approval, block]))
        return rows

    def _approval_keys(self) -> list[str]:
        return [*self.base_document.allowed_effects, AMOUNT_APPROVAL]

    def _approval_rule(self, key: str) -> ApprovalRule | None:
        if key == AMOUNT_APPROVAL:
            return self.base_document.amount_approval
        return self.base_document.approvals.get(key)

    def _add_approval(self, i: int, key: str) -> ApprovalRow:
        rule = self._approval_rule(key)
        shown = rule or RULE_DEFAULTS
        prefix = f"approval-{i}"
        where: Path = (AMOUNT_APPROVAL,) if key == AMOUNT_APPROVAL else ("approvals", key)
        keep = {shown.group if rule else "", shown.escalate_to or ""}
        self.fields[f"{prefix}-group"] = forms.ChoiceField(
            label="Approved by",
            required=False,
            choices=self.group_choices("Nobody: no approval needed", keep),
            initial=rule.group if rule else "",
            help_text="The group whose members approve it first.",
        )
        numbers = {
            "approvers": ("Approvers needed", shown.approvers, "How many different people."),
            "expires": (
                "Expires after (hours)",
                shown.expires_after_hours,
                "Undecided after this long, the request expires and the run fails.",
            ),
            "escalate_after": (
                "Escalate after (hours)",
                shown.escalate_after_hours,
                "Undecided after this long, it is handed to the escalation group.",
            ),
        }
        for field, (text, initial, help_text) in numbers.items():
            self.fields[f"{prefix}-{field}"] = NumberField(
                label=text, required=False, initial=initial, help_text=help_text
            )
        self.fields[f"{prefix}-escalate_to"] = forms.ChoiceField(
            label="Escalate to",
            required=False,
            choices=self.group_choices("Nobody: no escalation", keep),
            initial=shown.escalate_to or "",
            help_text="The group that takes over a request nobody decided in time.",
        )
        self.fields[f"{prefix}-bulk"] = forms.BooleanField(
            label="Decide several at once",
            required=False,
            initial=shown.bulk,
            help_text=(
                "Approvers may decide these requests together from the inbox, each checked "
                "on its own; never one that needs two approvers or that a risk signal sent."
            ),
        )
        for part, field in [
            ((), "group"),
            (("group",), "group"),
            (("approvers",), "approvers"),
            (("expires_after_hours",), "expires"),
            (("escalate_after_hours",), "escalate_after"),
            (("escalate_to",), "escalate_to"),
            (("bulk",), "bulk"),
        ]:
            self.places[(*where, *part)] = f"{prefix}-{field}"
        text = (
            "An amount over its tier's approval limit"
            if key == AMOUNT_APPROVAL
            else label(Kind.EFFECT, key)
        )
        return ApprovalRow(key, text, *(self[f"{prefix}-{f}"] for f in APPROVAL_FIELDS))

    def _add_signal(self, i: int, name: str) -> SignalRow:
        signal = self.base_document.signals[name]
        prefix = f"signal-{i}"
        self.fields[f"{prefix}-enabled"] = forms.BooleanField(
            label="On",
            required=False,
            initial=True,
            help_text="Off removes the signal from this version.",
        )
        self.fields[f"{prefix}-action"] = forms.ChoiceField(
            label="When it matches",
            choices=SIGNAL_ACTIONS,
            initial=signal.action.value,
        )
        self.fields[f"{prefix}-approval_group"] = forms.ChoiceField(
            label="Approved by",
            required=False,
            choices=self.group_choices(
                "(choose when an approver must agree)",
                {signal.approval.group if signal.approval else ""},
            ),
            initial=signal.approval.group if signal.approval else "",
            help_text="Only used when an approver must agree.",
        )
        phrases = []
        # English first, then the others in a fixed order (the database keeps no key order).
        known = [code for code in LANGUAGES if code in signal.phrases or code == "en"]
        for language in [*known, *sorted(set(signal.phrases) - set(known))]:
            field = f"{prefix}-phrases-{language}"
            self.fields[field] = forms.CharField(
                label=f"Phrases in {LANGUAGES.get(language, language)}",
                required=False,
                max_length=PHRASES_TEXT_LIMIT,
                widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
                initial="\n".join(signal.phrases.get(language, [])),
                help_text=PHRASES_HELP,
            )
            self.places[("signals", name, "phrases", language)] = field
            phrases.append(self[field])
        self.places[("signals", name)] = f"{prefix}-action"
        self.places[("signals", name, "action")] = f"{prefix}-action"
        self.places[("signals", name, "approval")] = f"{prefix}-approval_group"
        self.places[("signals", name, "phrases")] = phrases[0].name
        return SignalRow(
            name,
            humanize(name),
            signal.description,
            dict(SIGNAL_ACTIONS)[signal.action.value],
            self[f"{prefix}-enabled"],
            self[f"{prefix}-action"],
            self[f"{prefix}-approval_group"],
            phrases,
        )

    # --- the document ---

    def document(self) -> PolicyDocument | None:
        """The base document with the fields applied, validated as a new version; None (and
        the problems added to the form, each at its field) when the schema refuses it."""
        data = self._applied()
        try:
            return PolicyDocument.model_validate(data, context=NEW_VERSION)
        except ValidationError as exc:
            for error in exc.errors():
                self.add_problem(problem_path(error), plain_problem(error))
            return None

    def _applied(self) -> dict[str, Any]:
        data = self.base_document.model_dump(mode="json")
        values = self.cleaned_data
        data["version"] = values["version"].strip()
        data["note"] = values["note"].strip()
        data["confidence"] = {
            "default": values["confidence_default"],
            "per_category": {
                category: values[field.name]
                for category, field in zip(self.categories, self.category_fields, strict=True)
                if values[field.name] is not None
            },
        }
        data["amount_limits"] = self._limits(values)
        data["money"] = self._money(values)
        for row in self.approval_rows:
            rule = self._rule(values, row)
            if row.code == AMOUNT_APPROVAL:
                data[AMOUNT_APPROVAL] = rule
            elif rule is None:
                data["approvals"].pop(row.code, None)
            else:
                data["approvals"][row.code] = rule
        data["signals"] = {
            row.code: self._signal(values, row, data["signals"][row.code])
            for row in self.signal_rows
            if values[row.enabled.name]
        }
        return data

    def _limits(self, values: dict[str, Any]) -> dict[str, Any]:
        limits: dict[str, Any] = {}
        for tier, (_, (approval, block)) in zip(self.tiers, self.tier_rows, strict=True):
            above = {"approval_above": values[approval.name], "block_above": values[block.name]}
            if any(value is not None for value in above.values()):
                limits[tier] = {k: _amount(v) for k, v in above.items()}
                # The effects a limit is written for are kept (the YAML changes them).
                was = self.base_document.amount_limits.get(tier)
                if was is not None and was.effects is not None:
                    limits[tier]["effects"] = was.effects
        return limits

    def _rule(self, values: dict[str, Any], row: ApprovalRow) -> dict[str, Any] | None:
        if not values[row.group.name]:
            return None
        numbers = {
            "approvers": values[row.approvers.name],
            "expires_after_hours": values[row.expires.name],
            "escalate_after_hours": values[row.escalate_after.name],
        }
        return {
            "group": values[row.group.name],
            **{key: number for key, number in numbers.items() if number is not None},
            "escalate_to": values[row.escalate_to.name] or None,
            "bulk": bool(values[row.bulk.name]),
        }

    def _signal(
        self, values: dict[str, Any], row: SignalRow, was: dict[str, Any]
    ) -> dict[str, Any]:
        phrases = {field.name.rsplit("-", 1)[1]: lines(values[field.name]) for field in row.phrases}
        action = values[row.action.name]
        group = values[row.approval_group.name]
        approval = None
        if action == SignalAction.APPROVAL and group:
            approval = {**(was.get("approval") or {}), "group": group}
        signal = {
            **was,
            "action": action,
            "approval": approval,
            "phrases": {language: listed for language, listed in phrases.items() if listed},
        }
        # A changed signal is a new version of it: the rule's text on a run names it (v2).
        kept = {language: listed for language, listed in was["phrases"].items() if listed}
        before = {**was, "phrases": kept}
        if signal != before:
            signal["version"] = int(was.get("version", 1)) + 1
        return signal


def _amount(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def sentence(message: str) -> str:
    """A message as a sentence: a capital first and a full stop last."""
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def parse_yaml(text: str) -> tuple[PolicyDocument | None, list[Problem]]:
    """The YAML editor's text as a document, or None and its problems in plain words."""
    try:
        return parse_policy_text(text), []
    except PolicyError as exc:
        return None, document_problems(exc)
