"""Checks on extracted fields that the decision schema cannot express: amounts, currencies, dates.

A field that fails holds the run in the correction queue (`extraction_invalid`) with that
field named, so a person fixes the value instead of the workflow guessing.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from automation.schemas import FieldProblem

# ISO 4217 codes in everyday use; an unknown code is a misreading, not a new currency.
CURRENCIES = frozenset(
    {
        "AUD", "BRL", "CAD", "CHF", "CNY", "CZK", "DKK", "EUR", "GBP", "HKD", "HUF", "INR",
        "JPY", "KRW", "MXN", "NOK", "NZD", "PLN", "RON", "SEK", "SGD", "TRY", "USD", "ZAR",
    }
)  # fmt: skip
_AMOUNT = re.compile(r"^\s*(?P<number>[0-9][0-9.,' ]*)\s*(?P<currency>[A-Za-z]{3})?\s*$")
DATE_FORMATS = ("%Y-%m-%d", "%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y")


def parse_amount(text: str) -> tuple[Decimal, str | None]:
    """'1,250.00 EUR' -> (1250.00, 'EUR'). Refuses two decimal separators or mixed styles."""
    match = _AMOUNT.match(text)
    if match is None:
        raise ValueError("is not an amount")
    number, currency = (
        match.group("number").replace(" ", "").replace("'", ""),
        match.group("currency"),
    )
    if "," in number and "." in number:
        # One style only: thousands with one mark, decimals with the other, in that order.
        if number.rfind(",") > number.rfind("."):
            raise ValueError("mixes decimal separators")
        number = number.replace(",", "")
    elif number.count(",") == 1 and len(number.split(",")[1]) != 3:
        number = number.replace(",", ".")  # a decimal comma
    else:
        number = number.replace(",", "")
    if number.count(".") > 1:
        raise ValueError("has two decimal separators")
    try:
        return Decimal(number), currency.upper() if currency else None
    except InvalidOperation:
        raise ValueError("is not an amount") from None


def parse_date(text: str) -> date:
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt).date()  # noqa: DTZ007 - a calendar date
        except ValueError:
            continue
    raise ValueError("is not a date (use 2026-11-29 or 29 November 2026)")


def extraction_problems(fields: dict[str, Any]) -> list[FieldProblem]:
    """Every extracted field whose value cannot be what its name says."""
    problems = []
    for name, field in sorted(fields.items()):
        value = str(field.get("value", "")) if isinstance(field, dict) else str(field)
        try:
            _check(name, value)
        except ValueError as exc:
            problems.append(FieldProblem(field=f"fields.{name}", message=f"{value!r} {exc}"))
    return problems


def _check(name: str, value: str) -> None:
    if name == "amount":
        _, currency = parse_amount(value)
        if currency is not None and currency not in CURRENCIES:
            raise ValueError(f"names {currency}, which is not an ISO 4217 currency")
    elif name == "currency" and value.upper() not in CURRENCIES:
        raise ValueError("is not an ISO 4217 currency")
    elif name == "date" or name.endswith("_date"):
        parse_date(value)
