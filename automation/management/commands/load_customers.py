from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.intake.customers import customers_load


class Command(BaseCommand):
    help = "Create or update the customer registry from a CSV file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "file", type=Path, help="CSV with columns reference,name,account_tier,email_domains"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            created, updated = customers_load(path=options["file"])
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"customers: {created} created, {updated} updated")
