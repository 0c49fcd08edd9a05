from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.classifiers import ClassifierUnavailable
from automation.services.evaluation import LabelsInvalid, classifier_evaluate
from policy.models import PolicyVersion


class Command(BaseCommand):
    help = (
        "Measure a classifier on a labelled set of messages (labels.csv beside the .eml files, "
        "customers.csv too if present): accuracy, and the share of runs policy sends to people. "
        "Runs the real pipeline up to the decision and leaves nothing behind."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("labels", type=Path)
        parser.add_argument("--classifier", default="heuristic")
        parser.add_argument("--policy", help="policy version to decide under (default: active)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = classifier_evaluate(
                labels=options["labels"], classifier=options["classifier"], policy=options["policy"]
            )
        except (OSError, LabelsInvalid, ClassifierUnavailable, PolicyVersion.DoesNotExist) as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
            return
        for line in report.lines():
            self.stdout.write(line)
        if options["verbosity"] >= 2:
            for r in report.readings:
                mark = (
                    "ok " if (r.category, r.effect) == (r.label_category, r.label_effect) else "   "
                )
                self.stdout.write(
                    f"{mark}{r.file}: {r.category}/{r.effect} (labelled {r.label_category}/"
                    f"{r.label_effect}) -> {r.destination}"
                )
