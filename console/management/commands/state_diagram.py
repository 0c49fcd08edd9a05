"""`manage.py state_diagram`: the run states as docs/recovery.md shows them, printed from
the code (console.statechart for the diagram, console.vocabulary for the table), so the page
is regenerated rather than edited by hand."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from console import statechart
from console.vocabulary import markdown_table


class Command(BaseCommand):
    help = (
        "Print the run states as a Mermaid diagram read from the code (the one in "
        "docs/recovery.md), or with --table that page's table of states."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--table", action="store_true", help="print the table of states")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["table"]:
            self.stdout.write(markdown_table("state", "State"))
        else:
            self.stdout.write(statechart.mermaid())
