from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from devtools.demo_history import CHANNEL, history_seed


class Command(BaseCommand):
    help = "Demo only: weeks of past runs, made by the real services, for the reports."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--weeks", type=int, default=8)
        parser.add_argument("--per-day", type=int, default=3, help="runs on a working day")

    def handle(self, *args: Any, **options: Any) -> None:
        weeks, per_day = options["weeks"], options["per_day"]
        if weeks < 1 or per_day < 1:
            raise CommandError("--weeks and --per-day must be at least 1")
        self.stdout.write(f"Seeding {weeks} weeks of history (first start only)...")
        seeded = history_seed(now=timezone.now(), weeks=weeks, per_day=per_day)
        if seeded.skipped:
            self.stdout.write(f"History already seeded (channel {CHANNEL!r}): nothing to do.")
        else:
            self.stdout.write(f"History: {seeded.runs} runs over {seeded.weeks} weeks.")
