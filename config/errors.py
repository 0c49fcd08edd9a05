"""The one error a service raises when it refuses a use case."""

from __future__ import annotations

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
