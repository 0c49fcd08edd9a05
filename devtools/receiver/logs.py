"""The receiver's failures on purpose are what it is for, not server errors: Django logs every
503 at ERROR (the request log, and runserver's access log in the demo), so these are lowered
to INFO. Any other 5xx keeps its level."""

from __future__ import annotations

import logging

from django.urls import reverse

PLANNED_STATUS = 503
LOGGERS = ("django.request", "django.server")


class PlannedFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == PLANNED_STATUS and record.levelno > logging.INFO:
            # Both loggers name the path in the message: "Service Unavailable: /demo/..."
            # and '"POST /demo/... HTTP/1.1" 503 45'.
            prefix = reverse("receiver:receive", args=["effect"]).removesuffix("effect")
            if prefix in record.getMessage():
                record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def lower_planned_failures() -> None:
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, PlannedFailures) for f in logger.filters):
            logger.addFilter(PlannedFailures())
