"""The one error a service raises when it refuses a use case."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_core.core_schema import ErrorType

from core.codes import Refusal


class ServiceError(Exception):
    """A use case refused: `code` is stable, for programs and tests; `message` is in plain
    words, for the person who asked. Views and commands render it; services never do."""

    def __init__(self, code: Refusal, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def state_conflict(operation: str) -> ServiceError:
    """The refusal of an operation the run's state does not allow, once it is recorded."""
    return ServiceError(
        Refusal.STATE_CONFLICT, f"{operation} does not apply to this run in its state now"
    )


def field_messages(
    error: ValidationError, *, root: str, words: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The one place that turns pydantic errors into what people read: (where, message) for
    each problem, `where` a dotted path into the input (`root` for the input as a whole).
    `words` replaces the wording of some error types for one kind of input (a policy
    document's fields are settings, written in YAML: policy.services.POLICY_WORDS)."""
    found = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or root
        found.append((where, plain_message(item, words=words)))
    return found


# Pydantic's error types in plain words, as they read after the name of the value ("subject
# must not be empty"). The fields come from the error's context; {shown} is the value sent,
# where saying it helps ("must be at least 1 (it was 0)"), and {allowed} the codes a closed
# set takes: they stay in the message, since they are what an integrator sends.
PLAIN: dict[str, str] = {
    "missing": "is required",
    "extra_forbidden": "is not part of the contract",
    "literal_error": "must be one of {allowed}{shown}",
    "enum": "must be one of {allowed}{shown}",
    "greater_than_equal": "must be at least {ge}{shown}",
    "greater_than": "must be more than {gt}{shown}",
    "less_than_equal": "must be at most {le}{shown}",
    "less_than": "must be less than {lt}{shown}",
    "multiple_of": "must be a multiple of {multiple_of}{shown}",
    "int_type": "must be a whole number{shown}",
    "int_parsing": "must be a whole number{shown}",
    "int_parsing_size": "must be a whole number{shown}",
    "int_from_float": "must be a whole number{shown}",
    "float_type": "must be a number{shown}",
    "float_parsing": "must be a number{shown}",
    "decimal_type": "must be a number{shown}",
    "decimal_parsing": "must be a number{shown}",
    "finite_number": "must be a number{shown}",
    "decimal_max_digits": "must have at most {max_digits_n}{shown}",
    "decimal_max_places": "must have at most {decimal_places_n}{shown}",
    "decimal_whole_digits": "must have at most {whole_digits_n} before the point{shown}",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "string_unicode": "must be text",
    "string_empty": "must not be empty",  # string_too_short when at least 1 character
    "string_too_short": "must be at least {min_length_characters}",
    "string_too_long": "must be at most {max_length_characters}",
    "string_pattern_mismatch": "has characters that are not allowed here",
    "too_short": "must have at least {min_length_entries}",
    "too_long": "must have at most {max_length_entries}",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "set_type": "must be a list",
    "frozen_set_type": "must be a list",
    "dict_type": "must be an object with named fields",
    "mapping_type": "must be an object with named fields",
    "model_type": "must be an object with named fields",
    "model_attributes_type": "must be an object with named fields",
    "dataclass_type": "must be an object with named fields",
    "datetime_type": "must be a date and time such as 2026-03-01T09:30:00Z",
    "datetime_parsing": "must be a date and time such as 2026-03-01T09:30:00Z",
    "datetime_from_date_parsing": "must be a date and time such as 2026-03-01T09:30:00Z",
    "datetime_object_invalid": "must be a date and time such as 2026-03-01T09:30:00Z",
    "timezone_aware": "must be a date and time such as 2026-03-01T09:30:00Z",
    "date_type": "must be a date such as 2026-03-01",
    "date_parsing": "must be a date such as 2026-03-01",
    "date_from_datetime_parsing": "must be a date such as 2026-03-01",
    "date_from_datetime_inexact": "must be a date such as 2026-03-01",
    "json_invalid": "is not valid JSON",
}
# A type of pydantic's own that the table does not word: never pydantic's text.
NOT_ALLOWED = "is not an allowed value"
# Pydantic's own error types; any other is a PydanticCustomError whose text our code wrote.
PYDANTIC_TYPES = frozenset(get_args(ErrorType))
SHOWN_CHARS = 60  # how much of a value sent is repeated in the message
NOUNS = {
    "min_length_characters": ("min_length", "character"),
    "max_length_characters": ("max_length", "character"),
    "min_length_entries": ("min_length", "entry"),
    "max_length_entries": ("max_length", "entry"),
    "max_digits_n": ("max_digits", "digit"),
    "decimal_places_n": ("decimal_places", "decimal place"),
    "whole_digits_n": ("whole_digits", "digit"),
}


def plain_message(
    item: ErrorDetails, *, words: Mapping[str, str] | None = None, say_input: bool = True
) -> str:
    """One pydantic error in plain words ("must be one of …", not "Input should be …").
    `words` replaces the table's wording of some types; `say_input=False` leaves out the
    value sent, for a caller that names it already."""
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        kind = "string_empty"
    template = (words or {}).get(kind) or PLAIN.get(kind)
    if template is None:
        if kind in PYDANTIC_TYPES and kind not in ("value_error", "assertion_error"):
            return NOT_ALLOWED
        return _own_words(str(item["msg"]))
    allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
    if "{allowed}" in template and not allowed:
        return NOT_ALLOWED
    values = {
        **ctx,
        "allowed": _listed(allowed),
        "shown": _shown(item.get("input")) if say_input else "",
        **{name: _counted(ctx.get(key), noun) for name, (key, noun) in NOUNS.items()},
    }
    return template.format(**values)


def _shown(given: Any) -> str:
    if isinstance(given, bool) or not isinstance(given, str | int | float) or given == "":
        return ""
    text = repr(given if len(str(given)) <= SHOWN_CHARS else f"{str(given)[:SHOWN_CHARS]}…")
    return f" (it was {text})"


def _counted(count: Any, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{count} {noun if count == 1 else plural}"


def _listed(values: list[str]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else "".join(values)


def _own_words(message: str) -> str:
    """A message our code wrote (a validator's ValueError, a PydanticCustomError), as it
    reads after the value's name: without pydantic's prefix, lower-case unless an acronym."""
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() else message
