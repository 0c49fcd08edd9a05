from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.terminal import parse_when
from reports.rollups import rollups_rebuild


def _day(text: str) -> datetime:
    """A day's midnight, UTC, the start the rollups are counted from."""
    try:
        return parse_when(text, zone=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    except ValueError as exc:
        raise CommandError(f"--since takes a date such as 2026-01-31, not {text!r}") from exc


class Command(BaseCommand):
    help = "Recount the report rollups from the runs (all of history, or from --since)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", type=str, help="first day to recount (UTC), YYYY-MM-DD")

    def handle(self, *args: Any, **options: Any) -> None:
        since = None
        if options["since"]:
            since = _day(options["since"])
        try:
            hours = rollups_rebuild(since=since)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Rollups rebuilt: {hours} hours recounted.")
