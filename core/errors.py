"""The one error a service raises when it refuses a use case."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

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


def field_messages(error: ValidationError, *, root: str) -> list[tuple[str, str]]:
    """The one place that turns pydantic errors into what people read: (where, message) for
    each problem, `where` a dotted path into the input (`root` for the input as a whole)."""
    found = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or root
        found.append((where, _plain(item)))
    return found


def _listed(values: list[str]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else "".join(values)


def _plain(item: Any) -> str:
    """Pydantic's message in plain words ("must be one of …", not "Input should be …"). The
    codes a value may take stay in the message: they are what an integrator sends."""
    kind, ctx = item["type"], item.get("ctx") or {}
    given = item.get("input")
    shown = f" (it was {given!r})" if isinstance(given, str | int | float) and given != "" else ""
    if kind == "extra_forbidden":
        return "is not part of the contract"
    if kind == "missing":
        return "is required"
    if kind in ("literal_error", "enum"):
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"must be one of {_listed(allowed)}{shown}" if allowed else "is not an allowed value"
    if kind == "string_too_long":
        return f"is too long: at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"is too short: at least {ctx.get('min_length')} characters"
    if kind in ("too_long", "too_short"):
        bound = "at most" if kind == "too_long" else "at least"
        wanted = ctx.get("max_length") if kind == "too_long" else ctx.get("min_length")
        return f"must have {bound} {wanted} items"
    limits = {
        "greater_than_equal": ("at least", "ge"),
        "greater_than": ("more than", "gt"),
        "less_than_equal": ("at most", "le"),
        "less_than": ("less than", "lt"),
    }
    if kind in limits:
        words, key = limits[kind]
        return f"must be {words} {ctx.get(key)}{shown}"
    if kind.startswith(("float_", "int_", "decimal_")) or kind == "finite_number":
        return f"must be a number{shown}"
    if kind.startswith("bool_"):
        return "must be true or false"
    if kind in ("string_type", "string_unicode"):
        return "must be text"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be an object with named fields"
    if kind in ("list_type", "tuple_type", "set_type"):
        return "must be a list"
    if kind == "string_pattern_mismatch":
        return "has characters that are not allowed here"
    if kind.startswith(("datetime_", "date_")):
        return "must be a date and time such as 2026-03-01T09:30:00Z"
    message = str(item["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() else message
