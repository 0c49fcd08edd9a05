"""Log formats: one JSON object per line for collectors, or plain text for a terminal.

Structured fields travel as `extra=` on the record (`log.info("...", extra={"run_id": 7})`);
both formats print them, so a line about a run says which run and which event it is about.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra=` and is data.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a caller attached to this record."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _RECORD_ATTRIBUTES and not key.startswith("_")
    }


def _plain_value(value: Any) -> Any:
    # JSON keeps what it can say natively; anything else (a request object, a datetime)
    # is written as its string form rather than failing the line.
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain_value(item) for key, item in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message and every extra field."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            line.setdefault(key, _plain_value(value))  # a field never hides the basics
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """The usual text line, followed by the extra fields as key=value pairs."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{key}={json.dumps(_plain_value(value), ensure_ascii=False)}"
            for key, value in record_fields(record).items()
        )
        text = super().formatMessage(record)
        return f"{text} {fields}" if fields else text
