from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from policy.services import DEFAULT_VERSION, PolicyError, policy_load_file, shipped


class Command(BaseCommand):
    help = (
        "Validate and store policy YAML files as immutable versions. Without files: the shipped "
        f"ones, and {DEFAULT_VERSION} becomes active when no version is (or with --activate)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", type=Path)
        parser.add_argument("--activate", action="store_true", help="make it the active version")

    def handle(self, *args: Any, **options: Any) -> None:
        files = options["files"] or shipped(first=DEFAULT_VERSION)
        for path in files:
            # Without files, --activate makes the safe default active, not every shipped file.
            activate = options["activate"] and (
                bool(options["files"]) or path.stem == DEFAULT_VERSION
            )
            try:
                version, created = policy_load_file(path=path, activate=activate)
            except (PolicyError, OSError, UnicodeDecodeError) as exc:
                raise CommandError(f"{path}: {exc}") from exc
            state = "stored" if created else "already stored"
            active = " (active)" if version.is_active else ""
            self.stdout.write(f"{version.name}: {state}, checksum {version.checksum[:12]}{active}")
