"""Checks on extracted fields that the decision schema cannot express: amounts, currencies, dates.

Also how a customer reference is spotted in a text, for enrichment and the heuristic reader,
and how amounts and dates written in a message are read into facts: an amount is a Decimal
and an ISO 4217 code, a date a calendar date.

Libraries do the reading (docs/business.md says why these): Babel (CLDR data) reads a number
as a language writes it and strictly, refusing a grouping that is off, and names the months
of each language; dateparser reads a date written in words in any of them. What stays here
is the rule that a person decides what is ambiguous: `1,250` with no language to say whether
the comma groups thousands, `03/04/2026` where nothing says which is the day, `$` that
several currencies write. Such a value is refused with the reason, never guessed.

A field that fails holds the run in the correction queue (`extraction_invalid`) with that
field named, so a person fixes the value instead of the workflow guessing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

from babel import Locale, UnknownLocaleError
from babel.dates import get_month_names
from babel.numbers import NumberFormatError, get_currency_precision, get_decimal_symbol
from babel.numbers import parse_decimal as babel_decimal
from dateparser.date import DateDataParser

from automation.conf import setting
from automation.schemas import FieldProblem
from policy.catalogue import CustomerMatching

# ISO 4217 codes in everyday use; an unknown code is a misreading, not a new currency.
CURRENCIES = frozenset(
    {
        "AUD", "BRL", "CAD", "CHF", "CNY", "CZK", "DKK", "EUR", "GBP", "HKD", "HUF", "INR",
        "JPY", "KRW", "MXN", "NOK", "NZD", "PLN", "RON", "SEK", "SGD", "TRY", "USD", "ZAR",
    }
)  # fmt: skip
DOLLARS = frozenset({"USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN"})
# What a currency sign means. A sign several currencies write ($, ¥) is read only when the
# context names one of them (the customer's or the business's currency), else a person says.
SYMBOLS: dict[str, frozenset[str]] = {
    "€": frozenset({"EUR"}),
    "£": frozenset({"GBP"}),
    "$": DOLLARS,
    "US$": frozenset({"USD"}),
    "CA$": frozenset({"CAD"}),
    "C$": frozenset({"CAD"}),
    "AU$": frozenset({"AUD"}),
    "A$": frozenset({"AUD"}),
    "NZ$": frozenset({"NZD"}),
    "¥": frozenset({"JPY", "CNY"}),
}
SYMBOL_PATTERN = "|".join(re.escape(s) for s in sorted(SYMBOLS, key=len, reverse=True))
# The languages amounts and dates are read in when the message's is not known or not listed.
READ_LANGUAGES = ("en", "de", "fr", "es", "nl", "it")
# Where a language is written with the day and the month both ways round (US and UK English),
# a numeric date whose day could be its month is for a person.
MIXED_DATE_ORDER = frozenset({"en"})
# Spaces and apostrophes only ever group thousands (12 400,00 SEK; CHF 1'250.50).
GROUPING = re.compile(r"[ '\u00a0\u202f\u2009\u2019]")
_CURRENCY = rf"(?:{SYMBOL_PATTERN}|[A-Za-z]{{3}})"
_AMOUNT = re.compile(
    rf"^\s*(?P<pre>{_CURRENCY})?\s*(?P<number>[0-9][0-9.,'\u2019 \u00a0\u202f\u2009]*?)"
    rf"\s*(?P<post>{_CURRENCY})?\s*$"
)
# Fields that name a customer by reference: each must be in the customer registry.
CUSTOMER_FIELDS = frozenset({"customer_reference"})
# The two ways a number is written: a comma grouping thousands and a point before the
# decimals, or the other way round; Babel's locales for each.
NUMBER_STYLES = {".": "en", ",": "de"}


def reference_pattern(matching: CustomerMatching | None = None) -> re.Pattern[str]:
    """A customer reference as the business writes it: the catalogue's pattern
    (`customer_matching`), else the server's GATEHOUSE_CUSTOMER_REFERENCE_PATTERN."""
    written = matching.reference_pattern if matching is not None else None
    return re.compile(written or setting("CUSTOMER_REFERENCE_PATTERN"))


def references_in(text: str, pattern: re.Pattern[str] | None = None) -> list[str]:
    """Customer references in a text (by `pattern`, else the server's), in order of
    appearance, each once."""
    seen: dict[str, None] = {}
    for match in (pattern or reference_pattern()).finditer(text):
        seen.setdefault(match.group(0).upper(), None)
    return list(seen)


# --- amounts ------------------------------------------------------------------------------


def parse_amount(
    text: str, *, language: str | None = None, currency: str | None = None
) -> tuple[Decimal, str | None]:
    """'2.340,00 €', 'GBP 2,340' or "CHF 1'250.50" -> (Decimal, ISO code or None).

    The number is read the two ways numbers are written (Babel, strictly: groups of three);
    when both readings fit and differ (`1,250`), the message's `language` decides, and
    without one it is refused. A sign several currencies write ($) is read as `currency`,
    the one the context names, when it is one of them; otherwise refused. With a known
    currency, more decimals than the currency has are no reading (1.250 € is 1250 euros).
    The number keeps the decimals it was written with. Raises ValueError saying what is
    wrong.
    """
    match = _AMOUNT.match(text)
    if match is None:
        raise ValueError("is not an amount")
    code = _currency(match.group("pre"), match.group("post"), context=currency)
    precision = get_currency_precision(code) if code in CURRENCIES else None
    return _number(match.group("number").strip(), language, precision), code


def in_minor_units(number: Decimal, currency: str) -> Decimal:
    """The amount with its currency's decimals (2340 GBP is 2340.00; 1250 JPY stays 1250)."""
    return number.quantize(Decimal(1).scaleb(-get_currency_precision(currency)))


def _currency(pre: str | None, post: str | None, *, context: str | None) -> str | None:
    written = [sign for sign in (pre, post) if sign]
    if not written:
        return None
    codes = [_code(sign, context) for sign in written]
    if len(set(codes)) > 1:
        raise ValueError("names two currencies")
    return codes[0]


def _code(sign: str, context: str | None) -> str:
    if sign not in SYMBOLS:
        return sign.upper()
    codes = SYMBOLS[sign]
    if len(codes) == 1:
        return next(iter(codes))
    if context in codes:
        return context
    raise ValueError(f"writes {sign}, which stands for {', '.join(sorted(codes))}: say which")


def _number(number: str, language: str | None, precision: int | None) -> Decimal:
    plain = GROUPING.sub(" ", number).strip()
    readings: dict[str, Decimal] = {}
    for decimal_sign, locale in NUMBER_STYLES.items():
        group = "," if decimal_sign == "." else "."
        try:
            value = babel_decimal(plain.replace(" ", group), locale=locale, strict=True)
        except NumberFormatError:
            continue
        # 1.250 € cannot be one euro and a quarter of a cent: that reading is no reading.
        exponent = value.as_tuple().exponent
        if precision is None or (isinstance(exponent, int) and -exponent <= precision):
            readings[decimal_sign] = value
    values = sorted(set(readings.values()))
    if not values:
        raise ValueError(_why_no_number(plain))
    if len(values) == 1:
        return values[0]
    chosen = readings.get(_decimal_sign(language) or "")
    if chosen is None:
        raise ValueError(
            f"could be {values[1]} or {values[0]}: nothing says which sign marks the decimals"
        )
    return chosen


def _why_no_number(number: str) -> str:
    """What a person is told of a number no way of writing numbers reads."""
    signs = [c for c in number if c in ".,"]
    groups = re.split(r"[.,]", number)[1:]
    if len(set(signs)) == 2 and signs.count(signs[-1]) == 1:
        return "mixes decimal separators"
    if signs and (len(set(signs)) == 2 or any(len(group) != 3 for group in groups)):
        return "has two decimal separators" if len(signs) > 1 else "is not an amount"
    return "is not an amount (write 1,250.00 or 1.250,00)"


def _decimal_sign(language: str | None) -> str | None:
    locale = _locale(language)
    return str(get_decimal_symbol(locale)) if locale is not None else None


@functools.cache
def _locale(language: str | None) -> Locale | None:
    if not language:
        return None
    try:
        return Locale.parse(language.replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return None


# --- dates --------------------------------------------------------------------------------


@functools.cache
def _month_languages() -> dict[str, tuple[str, ...]]:
    """Each month name and short form as the languages read write them (CLDR, via Babel), in
    lower case without its dot, with the languages that write it."""
    found: dict[str, dict[str, None]] = {}
    for locale in (*READ_LANGUAGES, "en_GB", "de_AT", "de_CH"):
        for width in ("wide", "abbreviated"):
            for context in ("format", "stand-alone"):
                for name in get_month_names(width, context, locale=locale).values():
                    written = str(name).lower().strip(".")
                    found.setdefault(written, {})[locale.split("_")[0]] = None
    return {name: tuple(languages) for name, languages in found.items()}


def _month_names() -> tuple[str, ...]:
    """The month names, the longest first, so a pattern prefers it."""
    return tuple(sorted(_month_languages(), key=len, reverse=True))


MONTH_PATTERN = "|".join(re.escape(name) for name in _month_names())
_DAY = r"\d{1,2}(?:er|°|º|st|nd|rd|th|\.)?"
# "3 febbraio 2027", "3. März 2027", "1er décembre 2026", "3 de marzo de 2027", "March 3, 2027".
WRITTEN_DATE = (
    rf"{_DAY}\s(?:de\s)?(?:{MONTH_PATTERN})\.?,?\s(?:de\s)?\d{{4}}"
    rf"|(?:{MONTH_PATTERN})\.?\s{_DAY},?\s\d{{4}}"
)
ISO_DATE = r"\d{4}-\d{2}-\d{2}"
# 30.11.2026, 30/11/2026, 30-11-2026: four digits of year, so 30.11.26 is no date.
NUMERIC_DATE = r"\d{1,2}(?P<sep>[./-])\d{1,2}(?P=sep)\d{4}"
# Every date shape a message writes, for the readers that spot dates in a text.
DATE_PATTERN = rf"{ISO_DATE}|{NUMERIC_DATE}|{WRITTEN_DATE}"
_WRITTEN = re.compile(WRITTEN_DATE, re.IGNORECASE)
_MONTH = re.compile(rf"(?<![^\W\d_])(?:{MONTH_PATTERN})(?![^\W\d_])")
_NUMERIC = re.compile(r"(?P<a>\d{1,2})([./-])(?P<b>\d{1,2})\2(?P<year>\d{4})")
NOT_A_DATE = "is not a date (use 2026-11-29 or 29 November 2026)"
WRITTEN_SETTINGS = {"STRICT_PARSING": True, "REQUIRE_PARTS": ["day", "month", "year"]}


def parse_date(text: str, *, language: str | None = None) -> date:
    """'2026-12-03', '30.11.2026', '1er décembre 2026' or 'March 3, 2026' -> a date.

    A date in words is read by dateparser in the message's `language` (and the languages
    read, for a date quoted in another). A numeric date whose first two numbers could each
    be the day is read in the order the language writes (Babel's short date format); with no
    language, or one written both ways round (English), it is refused. Raises ValueError.
    """
    plain = " ".join(text.split())
    try:
        if re.fullmatch(ISO_DATE, plain):
            return date.fromisoformat(plain)
        if numeric := _NUMERIC.fullmatch(plain):
            return _numeric_date(numeric, language)
        if _WRITTEN.fullmatch(plain):
            return _written_date(plain, language)
    except ValueError as exc:
        raise ValueError(str(exc) if str(exc).startswith("could be") else NOT_A_DATE) from None
    raise ValueError(NOT_A_DATE)


def _numeric_date(match: re.Match[str], language: str | None) -> date:
    first, second, year = int(match["a"]), int(match["b"]), int(match["year"])
    day_first = _day_first(language)
    if day_first is None:
        if first <= 12 and second <= 12 and first != second:
            one, other = date(year, second, first), date(year, first, second)
            raise ValueError(
                f"could be {one.day} {one:%B} or {other.day} {other:%B} {year}: nothing says "
                "which is the day"
            )
        day_first = first > 12 or first == second
    day, month = (first, second) if day_first else (second, first)
    return date(year, month, day)


def _day_first(language: str | None) -> bool | None:
    """Whether the language writes the day before the month; None when it is not known or
    it is written both ways round."""
    locale = _locale(language)
    if locale is None or locale.language in MIXED_DATE_ORDER:
        return None
    pattern = str(locale.date_formats["short"].pattern)
    return pattern.find("d") < pattern.find("M")


def _written_date(text: str, language: str | None) -> date:
    return _read_written(text.lower(), language)


@functools.lru_cache(maxsize=4096)
def _read_written(text: str, language: str | None) -> date:
    """dateparser's reading, in the languages that write the text's month name (the
    message's first): one language is quicker to read in than six, and surer."""
    month = _MONTH.search(text)
    writing = _month_languages().get(month.group(0), READ_LANGUAGES) if month else READ_LANGUAGES
    languages = [code for code in dict.fromkeys([language or "", *writing]) if code in writing]
    found = _parser(tuple(languages)).get_date_data(text).date_obj
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    # The day and year written must be the ones read: nothing is made up or moved.
    if found is None or found.year not in numbers or found.day not in numbers:
        raise ValueError(NOT_A_DATE)
    return found.date()


@functools.lru_cache(maxsize=64)
def _parser(languages: tuple[str, ...]) -> DateDataParser:
    """A reader per set of languages, made once: making one costs more than a reading."""
    return DateDataParser(languages=list(languages), settings=WRITTEN_SETTINGS)


# --- the checks ---------------------------------------------------------------------------


def extraction_problems(
    fields: dict[str, Any],
    known_customers: Callable[[list[str]], set[str]] | None = None,
    *,
    language: str | None = None,
    currency: str | None = None,
) -> list[FieldProblem]:
    """Every extracted field whose value cannot be what its name says, amounts and dates
    read in the message's `language` (none: only what reads one way passes).

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
            _check(name, value, language=language, currency=currency)
            if known is not None and name in references and references[name] not in known:
                raise ValueError("matches no known customer")
        except ValueError as exc:
            problems.append(FieldProblem(field=f"fields.{name}", message=f"{value!r} {exc}"))
    return problems


def _check(name: str, value: str, *, language: str | None, currency: str | None) -> None:
    if name == "amount":
        _, code = parse_amount(value, language=language, currency=currency)
        if code is not None and code not in CURRENCIES:
            raise ValueError(f"names {code}, which is not an ISO 4217 currency")
    elif name == "currency" and value.upper() not in CURRENCIES:
        raise ValueError("is not an ISO 4217 currency")
    elif name == "date" or name.endswith("_date"):
        parse_date(value, language=language)
