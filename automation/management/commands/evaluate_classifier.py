from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.classifiers.base import ClassifierUnavailable
from automation.pipeline.evaluation import EvaluationReport, LabelsInvalid, classifier_evaluate
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
        parser.add_argument(
            "--compare",
            nargs=2,
            metavar=("A", "B"),
            help="two classifiers on the same set, figures side by side",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["compare"]:
            self._compare(options)
            return
        report = self._evaluate(options, options["classifier"])
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        else:
            for line in report.lines():
                self.stdout.write(line)
        if not report.readings and report.unanswered:
            unanswered = ", ".join(f"{n} {why}" for why, n in sorted(report.unanswered.items()))
            raise CommandError(
                f"no message got a reading ({unanswered}): this measures nothing of the "
                "classifier; check that its server is up and accepts the request"
            )
        if options["json"]:
            return
        if options["verbosity"] >= 2:
            for r in report.readings:
                mark = (
                    "ok " if (r.category, r.effect) == (r.label_category, r.label_effect) else "   "
                )
                self.stdout.write(
                    f"{mark}{r.file}: {r.category}/{r.effect} (labelled {r.label_category}/"
                    f"{r.label_effect}) -> {r.destination}"
                )

    def _evaluate(self, options: dict[str, Any], classifier: str) -> EvaluationReport:
        try:
            return classifier_evaluate(
                labels=options["labels"], classifier=classifier, policy=options["policy"]
            )
        except (OSError, LabelsInvalid, ClassifierUnavailable, PolicyVersion.DoesNotExist) as exc:
            raise CommandError(str(exc)) from exc

    def _compare(self, options: dict[str, Any]) -> None:
        reports = [self._evaluate(options, name) for name in options["compare"]]
        figures = [_figures(report) for report in reports]
        if options["json"]:
            self.stdout.write(json.dumps(dict(zip(options["compare"], figures, strict=True))))
            return
        a, b = reports
        self.stdout.write(f"{'':42} {a.classifier_version:>24} {b.classifier_version:>24}")
        # A classifier that read nothing has no figures per category: a dash, not a zero.
        for name in dict.fromkeys([*figures[0], *figures[1]]):
            first, second = (f.get(name, "—") for f in figures)
            self.stdout.write(f"{name:42} {first:>24} {second:>24}")


def _figures(report: EvaluationReport) -> dict[str, str]:
    """The figures that say whether a classifier may be trusted, as comparable text."""
    n = len(report.readings)
    wrong_through, through, _ = report.wrong_straight_through

    def share(part: int, whole: int) -> str:
        return f"{part}/{whole} = {part / whole:.1%}" if whole else f"{part}/{whole}"

    figures = {
        "messages": str(n),
        "no reading at all": str(sum(report.unanswered.values())),
        "category accuracy": share(report.category_correct, n),
        "effect accuracy": share(report.effect_correct, n),
        "routed to people": share(report.to_people, n),
        "read wrong among straight through": share(wrong_through, through),
    }
    for category in report.labelled_categories:
        figures[f"{category} recall"] = share(*report.recall(category))
        figures[f"{category} run straight through"] = share(*report.straight_through(category))
    return figures
