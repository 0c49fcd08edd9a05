from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.classifiers.training import TrainingError, classifier_train


class Command(BaseCommand):
    help = (
        "Train the `learned` classifier on labelled sets (labels.csv beside the .eml files; "
        "with none named, the sets uploaded in the console), on the request types of the "
        "active policy version, holding back a fixed quarter of each set to report on; store "
        "the model as a new version and make it the active one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "labels",
            nargs="*",
            type=Path,
            help="labels.csv files (default: the labelled sets stored in the console)",
        )
        parser.add_argument(
            "--labels-from-people",
            action="store_true",
            help="train on the labels people gave (QA, corrections, approvals) as well",
        )
        parser.add_argument(
            "--keep-active", action="store_true", help="store the model without activating it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = classifier_train(
                labels=options["labels"] or None,
                people=options["labels_from_people"],
                activate=not options["keep_active"],
            )
        except (OSError, TrainingError) as exc:
            raise CommandError(str(exc)) from exc
        for line in report.lines():
            self.stdout.write(line)
