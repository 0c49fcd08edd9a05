"""The one error a service raises when it refuses a use case."""

from __future__ import annotations

from pydantic import ValidationError

# Codes more than one app raises; the others are named where they are raised.
STATE_CONFLICT = "state_conflict"


class ServiceError(Exception):
    """A use case refused: `code` is stable, for programs and tests; `message` is in plain
    words, for the person who asked. Views and commands render it; services never do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def state_conflict(operation: str) -> ServiceError:
    """The refusal of an operation the run's state does not allow, once it is recorded."""
    return ServiceError(STATE_CONFLICT, f"{operation} does not apply to this run in its state now")


def field_messages(error: ValidationError, *, root: str) -> list[tuple[str, str]]:
    """The one place that turns pydantic errors into what people read: (where, message) for
    each problem, `where` a dotted path into the input (`root` for the input as a whole)."""
    found = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or root
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "is not part of the contract"
        elif item["type"] == "missing":
            message = "is required"
        found.append((where, message))
    return found
