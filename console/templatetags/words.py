"""The console's words for codes (console.vocabulary): `{% load words %}`.

`{{ run.state|said:"state" }}` is the label; `{{ run.state|meaning:"state" }}` its one-line
explanation; `{% term "state" run.state %}` both, as the label with the explanation on hover
and the code as quiet secondary text (`code=False` leaves the code out).
"""

from __future__ import annotations

import json

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from automation.models import Effect, Run
from console import vocabulary

register = template.Library()


@register.filter
def said(code: object, kind: str) -> str:
    return vocabulary.label(kind, code)


@register.simple_tag
def effect_status(effect: Effect, run: Run) -> SafeString:
    """An effect's status and its attempts: "Will try again · 1 attempt" while another attempt
    is due, "Gave up after 5 attempts" once none is."""
    said, stopped = vocabulary.effect_status_term(effect, run_state=run.state, now=timezone.now())
    attempts = f"{effect.attempts} attempt{'' if effect.attempts == 1 else 's'}"
    joined = "after" if stopped else "·"
    return format_html(
        '<strong title="{}">{}</strong> {} {}', said.explanation, said.label, joined, attempts
    )


@register.filter
def meaning(code: object, kind: str) -> str:
    return vocabulary.explain(kind, code)


@register.simple_tag
def term(kind: str, code: object, code_shown: bool = True) -> str:
    entry = vocabulary.term(kind, code)
    if not code_shown or code in (None, ""):
        return format_html(
            '<span class="term" title="{}">{}</span>', entry.explanation, entry.label
        )
    return format_html(
        '<span class="term" title="{}">{}</span> <small class="code">{}</small>',
        entry.explanation,
        entry.label,
        code,
    )


@register.filter
def words(code: object) -> str:
    """A code nobody named, as words: `billing_keywords` → "Billing keywords" ("—" for none)."""
    return vocabulary.humanize(str(code)) if code not in (None, "") else "—"


@register.filter
def pretty_json(value: object) -> str:
    """Stored JSON as a person reads it: indented, keys in order, not a Python dict."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


# What a request's own fields hold, by field name, where the value is one of our codes.
REQUEST_FIELD_KINDS = {
    "request_type": vocabulary.Kind.CATEGORY,
    "category": vocabulary.Kind.CATEGORY,
    "requested_action": vocabulary.Kind.EFFECT,
    "recommended_route": vocabulary.Kind.ROUTE,
    "requested_effect": vocabulary.Kind.EFFECT,
}


@register.filter
def request_value(value: object, field: str) -> str:
    """A request field's value as a person reads it: a code in words (the code as quiet
    secondary text), the rest as sent."""
    kind = REQUEST_FIELD_KINDS.get(field)
    if kind is None or not isinstance(value, str) or not value:
        return "" if value is None else str(value)
    return format_html('{} <small class="code">{}</small>', vocabulary.label(kind, value), value)
