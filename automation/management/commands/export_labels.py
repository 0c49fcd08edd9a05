from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from automation.intake.services import MAIL_TYPE
from automation.models import Label

COLUMNS = [
    "file",
    "category",
    "effect",
    "customer_reference",
    "thread_parent",
    "expected_intake",
    "extraction_problem",
    "note",
]


class Command(BaseCommand):
    help = (
        "Write the labels people gave (QA reviews, corrections, approvals) as a labelled set: "
        "labels.csv, in the sample set's columns, beside each run's stored input (.eml for an "
        "e-mail, .json for an event). A run judged more than once gets its latest label."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", type=Path)

    def handle(self, *args: Any, **options: Any) -> None:
        folder: Path = options["folder"]
        folder.mkdir(parents=True, exist_ok=True)
        latest: dict[int, Label] = {}
        labels = Label.objects.select_related("run__intake", "actor").order_by("created_at", "id")
        for label in labels.iterator():
            latest[label.run_id] = label
        with (folder / "labels.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            for run_id, label in sorted(latest.items()):
                intake = label.run.intake
                suffix = ".eml" if intake.content_type == MAIL_TYPE else ".json"
                name = f"run-{run_id}{suffix}"
                (folder / name).write_bytes(bytes(intake.raw))
                customer = ((label.run.enrichment or {}).get("customer") or {}).get("reference")
                writer.writerow(
                    {
                        "file": name,
                        "category": label.category,
                        "effect": label.effect,
                        "customer_reference": customer or "",
                        "thread_parent": "",
                        "expected_intake": "new",
                        "extraction_problem": "",
                        "note": f"{label.source} by {label.actor.get_username()} "
                        f"on {label.created_at:%Y-%m-%d}",
                    }
                )
        self.stdout.write(f"{len(latest)} labelled runs written to {folder}")
