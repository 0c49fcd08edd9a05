"""The words and links of the lists people work from (the approvals inbox, a queue):
`{% load lists %}`.

What a run or a request stores is written for the record: a JSON list of field problems,
a policy rule's text that quotes codes. These turn it into sentences a person reads, with
the codes left to secondary text.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from approvals.selectors import InboxRow, sla_of, sla_when
from automation.extraction import parse_amount
from automation.recovery.selectors import queue_due_at
from console import vocabulary
from console.templatetags.values import typed_shown, typed_stored
from core.keyset import order_link

register = template.Library()

# A reason is one line: longer stored text is cut at a word, the whole of it on hover.
REASON_WORDS = 24

# Policy rule texts (policy.evaluation) quote the codes they are about.
SIGNAL_TEXT = re.compile(r"signal (?P<name>[a-z][a-z0-9_]*) \(v\d+, [a-z]+\): ")
APPROVAL_TEXT = re.compile(
    r"'(?P<effect>[a-z_]+)' needs (?P<count>\d+) approvals? from '(?P<group>[^']+)'"
)


# Currencies written without minor units (ISO 4217 exponent 0); the others with two.
WHOLE_UNITS = frozenset({"JPY", "KRW"})


@register.filter
def in_its_currency(value: Any) -> str:
    """An amount as the reader reads a list: one way of writing numbers for every row
    (`12,400.00 SEK`, `12,400.00 EUR`), each in its own currency, never converted. An
    amount without a currency says none; one that cannot be read is shown as read."""
    if isinstance(value, dict):  # a typed amount: {"value": "12400.00", "currency": "SEK"}
        number, currency = value.get("value"), value.get("currency")
        value = f"{number} {currency or ''}".strip() if number is not None else None
    if value is None or str(value).strip() == "":
        return "—"
    try:
        number, currency = parse_amount(str(value))
    except ValueError:
        return str(value)
    return said_amount(number, currency)


def said_amount(number: Decimal, currency: str | None) -> str:
    places = 0 if currency in WHOLE_UNITS else 2
    written = f"{number:,.{places}f}"
    return f"{written} {currency}" if currency else written


@register.simple_tag(takes_context=True)
def ordered(context: template.Context, order: str) -> str:
    """This list's address in `order`, keeping every filter: `{% ordered 'newest' %}`."""
    return order_link(context["request"].GET, order)


@register.simple_tag
def sla(due_at: datetime | None, now: datetime, escalated: bool = False) -> SafeString:
    """The SLA badge in words (Due, Overdue, Escalated) and how far the deadline is."""
    if due_at is None:
        return format_html('<span class="muted">—</span>')
    return sla_badge(sla_of(due_at, now, escalated=bool(escalated)), sla_when(due_at, now))


@register.simple_tag
def sla_badge(state: str, when: str) -> SafeString:
    """The SLA badge of a state and distance already worked out (an inbox row's)."""
    entry = vocabulary.term(vocabulary.Kind.SLA, state)
    return format_html(
        '<span class="badge {}" title="{}">{}</span> <span class="when">{}</span>',
        state,
        entry.explanation,
        entry.label,
        when,
    )


@register.filter
def queue_due(run: Any) -> datetime | None:
    """When a held run is due to be worked (automation.recovery.selectors.QUEUE_SLA)."""
    return queue_due_at(run)


@register.filter
def rule_sentence(text: str) -> str:
    """A policy rule's text with its codes in words: "Risk signal “Account compromise”: …",
    "Queue an account review needs 1 approval from Security approvers"."""
    text = _codes_in_words(text)
    return text[:1].upper() + text[1:]


def _codes_in_words(text: str) -> str:
    text = SIGNAL_TEXT.sub(lambda m: f"risk signal “{vocabulary.humanize(m['name'])}”: ", text)
    text = APPROVAL_TEXT.sub(_approval_words, text)
    return QUOTED_CODE.sub(_quoted_words, text)


# A code a rule's text quotes ('open_return'), said as its label where it is one of ours.
QUOTED_CODE = re.compile(r"'([a-z][a-z0-9_]*)'")
QUOTED_KINDS = (
    vocabulary.Kind.EFFECT,
    vocabulary.Kind.ROUTE,
    vocabulary.Kind.CATEGORY,
    vocabulary.Kind.OUTCOME,
)


def _quoted_words(match: re.Match[str]) -> str:
    code = match[1]
    for kind in QUOTED_KINDS:
        if vocabulary.knows(kind, code):
            return f"“{vocabulary.label(kind, code)}”"
    return match[0]


def _approval_words(match: re.Match[str]) -> str:
    count = int(match["count"])
    effect = vocabulary.label(vocabulary.Kind.EFFECT, match["effect"])
    group = vocabulary.label(vocabulary.Kind.GROUP, match["group"])
    return f"{effect} needs {count} approval{'' if count == 1 else 's'} from {group}"


@register.filter
def approval_reason(row: InboxRow) -> str:
    """Why a request waits for a person, in one line: the sentence of the rule that asked."""
    if not row.reason:
        return "Policy requires a person to approve this effect."
    return rule_sentence(row.reason)


@register.filter
def hold_reason(run: Any) -> str:
    """Why a run is held, in plain sentences: the field problems stored as JSON read as
    "Amount: '1.250.00 EUR' has two decimal separators.", a stored message as it is (after
    the field it is about), codes in words."""
    problems = _problems(run.failure_detail)
    if problems is not None:
        return " ".join(
            _sentence(f"{field_words(p.get('field'))}: {_message(p)}") for p in problems
        )
    detail = _codes_in_words(str(run.failure_detail or ""))
    field = field_words(run.failure_field) if run.failure_field else ""
    if field and not detail.lower().startswith(field.lower()):
        detail = f"{field}: {detail}" if detail else field
    return _sentence(detail) if detail else ""


@register.filter
def one_line(text: str) -> str:
    return Truncator(text).words(REASON_WORDS, truncate="…")


def _problems(detail: str) -> list[dict[str, Any]] | None:
    """The [{field, message}] a validation hold stores, or None for a plain message."""
    if not detail.startswith("["):
        return None
    try:
        found = json.loads(detail)
    except json.JSONDecodeError:
        return None
    if isinstance(found, list) and found and all(isinstance(p, dict) for p in found):
        return found
    return None


def field_words(field: object) -> str:
    """A stored field path in words: `fields.customer_reference` is "Customer reference", an
    effect's name its label, `output` the classifier's answer."""
    field = str(field or "")
    if vocabulary.knows(vocabulary.Kind.EFFECT, field):
        return vocabulary.label(vocabulary.Kind.EFFECT, field)
    if field in ("output", "body"):
        return "The classifier's answer"
    parts = [p for p in field.split(".") if p not in ("fields", "value") and not p.isdigit()]
    return vocabulary.humanize(" ".join(parts)) if parts else "The answer"


# The start of pydantic's messages, as a person would say it after the field's name.
MESSAGE_STARTS = (
    (re.compile(r"^must be one of "), None),  # one of a closed set: the codes are not words
    (re.compile(r"^Input should be '"), None),  # as stored before messages were plain words
    (re.compile(r"^String should match pattern .*"), "uses characters that are not allowed"),
    (re.compile(r"^(Input|String|Value) should "), "should "),
    (re.compile(r"^Value error, "), ""),
)


def _message(problem: dict[str, Any]) -> str:
    message = str(problem.get("message", ""))
    for pattern, said in MESSAGE_STARTS:
        if pattern.match(message):
            if said is None:
                return "is not one of the allowed values"
            return pattern.sub(said, message, count=1)
    return message


def _sentence(text: str) -> str:
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?", "…")) else text + "."


# How the effect payload's values read: the kind of word each key holds.
PAYLOAD_KINDS = {
    "effect": vocabulary.Kind.EFFECT,
    "route": vocabulary.Kind.ROUTE,
    "request_type": vocabulary.Kind.CATEGORY,
    "account_tier": vocabulary.Kind.TIER,
}


@register.filter
def payload_rows(payload: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The proposed effect's parameters as (label, value in words, value as stored) rows."""
    rows = []
    # What will be sent is shown whole beside the rows (runs/_effect_request.html), and each
    # parameter is a row of its own.
    flat = {k: v for k, v in payload.items() if k not in ("request", "params")}
    flat.update(
        {f"parameter {name}": value for name, value in (payload.get("params") or {}).items()}
    )
    for key, value in flat.items():
        kind = PAYLOAD_KINDS.get(key)
        shown = vocabulary.label(kind, value) if kind else typed_shown(value)
        rows.append((vocabulary.humanize(key), shown, typed_stored(value)))
    return rows
