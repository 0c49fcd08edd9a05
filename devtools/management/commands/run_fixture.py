from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.fixtures import FixtureError, fixture_run, load_case_set


class Command(BaseCommand):
    help = "Run a case set through the real pipeline; exit non-zero if any outcome differs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = fixture_run(data=load_case_set(options["file"]))
        except FixtureError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        else:
            for case in report.cases:
                note = "" if case.ok else f"  (expected {case.expected})"
                self.stdout.write(f"{case.case_id} {case.outcome}{note}")
            for name, value in report.counters.items():
                self.stdout.write(f"{name}={value}")
        if not report.ok:
            wrong = sum(1 for case in report.cases if not case.ok)
            raise CommandError(f"{wrong} case(s) ended differently from what they expect")
