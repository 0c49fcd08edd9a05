from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policy.services import DEFAULTS_DIR, PolicyError, policy_load_file


class Command(BaseCommand):
    help = "Validate and store a policy YAML file as an immutable version (the defaults if none)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", type=Path)
        parser.add_argument("--activate", action="store_true", help="make it the active version")

    def handle(self, *args: Any, **options: Any) -> None:
        files = options["files"] or sorted(DEFAULTS_DIR.glob("*.yaml"))
        for path in files:
            try:
                version, created = policy_load_file(path=path, activate=options["activate"])
            except (PolicyError, OSError, UnicodeDecodeError) as exc:
                raise CommandError(f"{path}: {exc}") from exc
            state = "stored" if created else "already stored"
            active = " (active)" if version.is_active else ""
            self.stdout.write(f"{version.name}: {state}, checksum {version.checksum[:12]}{active}")
