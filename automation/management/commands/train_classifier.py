from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.classifiers.training import TrainingError, classifier_train


class Command(BaseCommand):
    help = (
        "Train the `learned` classifier on labelled sets (labels.csv beside the .eml files), "
        "holding back a fixed quarter of each to report on; store the model as a new version "
        "and make it the active one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "labels",
            nargs="*",
            type=Path,
            default=[Path("tests/data/mail/labels.csv"), Path("tests/data/mail-eval/labels.csv")],
            help="labels.csv files (default: the sample and the evaluation sets)",
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
                labels=options["labels"],
                people=options["labels_from_people"],
                activate=not options["keep_active"],
            )
        except (OSError, TrainingError) as exc:
            raise CommandError(str(exc)) from exc
        for line in report.lines():
            self.stdout.write(line)
