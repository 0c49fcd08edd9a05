"""Typed values as the console's reader reads them: an amount with its currency and a date,
written by Babel in the console's language (English)."""

from __future__ import annotations

import re
from typing import Any

from django import template

from automation.extraction import CURRENCIES, parse_amount, parse_date
from policy.catalogue import Money, date_text, money_text

register = template.Library()
CONSOLE_LANGUAGE = "en"
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def typed_shown(value: Any) -> str:
    """A parameter's value for a person: {"value": "2340.00", "currency": "GBP"} is
    £2,340.00, "2026-12-03" is December 3, 2026, anything else as it is."""
    try:
        if isinstance(value, dict) and set(value) == {"value", "currency"}:
            return money_text(value, CONSOLE_LANGUAGE)
        if isinstance(value, str) and ISO_DATE.fullmatch(value):
            return date_text(value, CONSOLE_LANGUAGE)
    except ValueError:
        pass
    return str(value)


def typed_stored(value: Any) -> str:
    """A parameter's value as stored, in one line: 2340.00 GBP."""
    return str(Money(value)) if isinstance(value, dict) else str(value)


@register.filter
def field_shown(field: Any, name: str) -> str:
    """An extracted field's value for a person: an amount or date that reads one way is
    written in the console's language; any other value (or one that could be read two ways)
    as the reading has it."""
    value = str(field.get("value", "")) if isinstance(field, dict) else str(field)
    try:
        if name == "amount":
            number, currency = parse_amount(value)
            if currency in CURRENCIES:
                return money_text({"value": str(number), "currency": currency}, CONSOLE_LANGUAGE)
        elif name == "date" or name.endswith("_date"):
            return date_text(parse_date(value).isoformat(), CONSOLE_LANGUAGE)
    except ValueError:
        pass
    return value
