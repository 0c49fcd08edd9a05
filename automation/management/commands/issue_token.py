from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from automation.intake.services import api_token_create, channel_get_or_create


class Command(BaseCommand):
    help = "Issue an API token for an intake channel. The key is shown once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--channel", default="api")

    def handle(self, *args: Any, **options: Any) -> None:
        channel = channel_get_or_create(name=options["channel"])
        token, key = api_token_create(name=options["name"], channel=channel)
        self.stdout.write(f"token {token.name} for channel {channel.name}: {key}")
