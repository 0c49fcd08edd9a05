"""Checks on extracted fields that the decision schema cannot express: amounts, currencies, dates.

Also how a customer reference is spotted in a text, for enrichment and the heuristic reader.

A field that fails holds the run in the correction queue (`extraction_invalid`) with that
field named, so a person fixes the value instead of the workflow guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from automation.conf import setting
from automation.schemas import FieldProblem

# ISO 4217 codes in everyday use; an unknown code is a misreading, not a new currency.
CURRENCIES = frozenset(
    {
        "AUD", "BRL", "CAD", "CHF", "CNY", "CZK", "DKK", "EUR", "GBP", "HKD", "HUF", "INR",
        "JPY", "KRW", "MXN", "NOK", "NZD", "PLN", "RON", "SEK", "SGD", "TRY", "USD", "ZAR",
    }
)  # fmt: skip
_AMOUNT = re.compile(r"^\s*(?P<number>[0-9][0-9.,' ]*)\s*(?P<currency>[A-Za-z]{3})?\s*$")
# Fields that name a customer by reference: each must be in the customer registry.
CUSTOMER_FIELDS = frozenset({"customer_reference"})
DATE_FORMATS = ("%Y-%m-%d", "%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y")


def reference_pattern() -> re.Pattern[str]:
    """A customer reference as this deployment writes it (GATEHOUSE_CUSTOMER_REFERENCE_PATTERN)."""
    return re.compile(setting("CUSTOMER_REFERENCE_PATTERN"))


def references_in(text: str) -> list[str]:
    """Customer references in a text, in order of appearance, each once."""
    seen: dict[str, None] = {}
    for match in reference_pattern().finditer(text):
        seen.setdefault(match.group(0).upper(), None)
    return list(seen)


def parse_amount(text: str) -> tuple[Decimal, str | None]:
    """'1,250.00 EUR' or '1.250,00 EUR' -> (1250.00, 'EUR').

    One style per amount: thousands marked with one sign in groups of three, the decimals
    with the other sign, once, at the end. Two decimal separators or a mix is refused.
    """
    match = _AMOUNT.match(text)
    if match is None:
        raise ValueError("is not an amount")
    number, currency = (
        re.sub(r"[ '\u00a0\u202f]", "", match.group("number")),
        match.group("currency"),
    )
    try:
        return Decimal(_plain_number(number)), currency.upper() if currency else None
    except InvalidOperation:
        raise ValueError("is not an amount") from None


def _plain_number(number: str) -> str:
    separators = [c for c in number if c in ".,"]
    if not separators:
        return number
    last = separators[-1]
    head, _, tail = number.rpartition(last)
    groups = re.split(r"[.,]", head)[1:]
    if len(set(separators)) == 2:
        if separators.count(last) > 1:
            raise ValueError("has two decimal separators")
        if any(len(group) != 3 for group in groups):
            raise ValueError("mixes decimal separators")
        return f"{re.sub(r'[.,]', '', head)}.{tail}"
    if len(separators) == 1:
        # '1,250' is a thousand and a quarter; '12,50' and '12.50' are twelve and a half.
        if last == "," and len(tail) == 3:
            return head + tail
        return f"{head}.{tail}"
    if all(len(group) == 3 for group in [*groups, tail]):
        return number.replace(last, "")  # 1,250,000 or 1.250.000
    raise ValueError("has two decimal separators")


# Month names as requests write them, in English, German, French, Spanish, Dutch and Italian
# (full names and the usual abbreviations), lower case.
MONTH_NAMES: dict[str, int] = {
    name: number
    for number, names in enumerate(
        [
            "january jan januar jänner janvier janv enero ene januari gennaio genn gen",
            "february feb februar février févr fevrier febrero februari febbraio febbr",
            "march mar märz maerz mars marzo maart",
            "april apr avril avr abril abr aprile",
            "may mai mayo mei maggio magg",
            "june jun juni juin junio giugno giu",
            "july jul juli juillet juil julio luglio lug",
            "august aug août aout agosto ago augustus",
            "september sep sept septembre septiembre settembre sett set",
            "october oct oktober octobre octubre okt ottobre ott",
            "november nov novembre noviembre",
            "december dec dez dezember décembre decembre diciembre dic dicembre",
        ],
        start=1,
    )
    for name in names.split()
}
MONTH_PATTERN = "|".join(sorted(MONTH_NAMES, key=len, reverse=True))
# "3 febbraio 2027", "3. März 2027", "3 de marzo de 2027", "March 3, 2027".
_WRITTEN_DATE = re.compile(
    rf"^(?:(?P<d1>\d{{1,2}})\.?\s+(?:de\s+)?(?P<m1>{MONTH_PATTERN})\.?\s+(?:de\s+)?(?P<y1>\d{{4}})"
    rf"|(?P<m2>{MONTH_PATTERN})\.?\s+(?P<d2>\d{{1,2}}),?\s+(?P<y2>\d{{4}}))$",
    re.IGNORECASE,
)


def parse_date(text: str) -> date:
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt).date()  # noqa: DTZ007 - a calendar date
        except ValueError:
            continue
    written = _WRITTEN_DATE.match(text.strip())
    if written is not None:
        day = written.group("d1") or written.group("d2")
        month = MONTH_NAMES[(written.group("m1") or written.group("m2")).lower()]
        year = written.group("y1") or written.group("y2")
        return date(int(year), month, int(day))  # ValueError for a day the month lacks
    raise ValueError("is not a date (use 2026-11-29 or 29 November 2026)")


def extraction_problems(
    fields: dict[str, Any], known_customers: Callable[[list[str]], set[str]] | None = None
) -> list[FieldProblem]:
    """Every extracted field whose value cannot be what its name says.

    `known_customers` answers which of some customer references exist; without it, customer
    references are not checked (pure callers: simulation, tests of the checks themselves).
    """
    problems = []
    values = {
        name: str(field.get("value", "")) if isinstance(field, dict) else str(field)
        for name, field in fields.items()
    }
    references = {n: v.strip().upper() for n, v in values.items() if n in CUSTOMER_FIELDS}
    known = known_customers(list(references.values())) if known_customers and references else None
    for name, value in sorted(values.items()):
        try:
            _check(name, value)
            if known is not None and name in references and references[name] not in known:
                raise ValueError("matches no known customer")
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
