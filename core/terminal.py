"""What operator commands share: reading a time from the command line, drawing progress."""

from __future__ import annotations

from datetime import datetime, tzinfo

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def parse_when(text: str, zone: tzinfo | None = None) -> datetime:
    """An ISO 8601 date and time, or a date (its midnight); a naive one is in `zone` (the
    current time zone unless given). The one parser for times people type to a command."""
    parsed = parse_datetime(text.strip())
    if parsed is None:
        raise ValueError(f"not a date and time: {text!r} (use ISO 8601, e.g. 2026-11-29T09:00)")
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, zone)


def when_argument(text: str) -> datetime:
    """parse_when as an argparse `type`, refusing with the command's own error."""
    try:
        return parse_when(text)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


class ProgressBar:
    """One redrawn line: `[#######.............]  35/100 messages`, ended when all are done."""

    def __init__(self, stream: OutputWrapper, unit: str = "", width: int = 30) -> None:
        self.stream = stream
        self.unit = f" {unit}" if unit else ""
        self.width = width

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if done == total else ""
        self.stream.write(f"\r[{bar}] {done:>{len(str(total))}}/{total}{self.unit}", ending=end)
        self.stream.flush()
