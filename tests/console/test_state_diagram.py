"""The documented run states are the code's: `manage.py state_diagram` prints them, and the
copy in docs/recovery.md must equal what it prints (regenerate it with the command when this
fails)."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

from django.core.management import call_command

from console import statechart
from console.vocabulary import markdown_table

RECOVERY = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"


def documented_section() -> str:
    text = RECOVERY.read_text(encoding="utf-8")
    start = text.index("\n## The run states\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def printed(*args: str) -> str:
    out = StringIO()
    call_command("state_diagram", *args, stdout=out)
    return out.getvalue().strip()


def test_the_command_prints_the_mermaid_diagram_and_the_table() -> None:
    assert printed() == statechart.mermaid()
    assert printed("--table") == markdown_table("state", "State")


def test_the_documented_diagram_and_table_are_what_the_code_generates() -> None:
    section = documented_section()
    blocks = re.findall(r"```mermaid\n(.*?)\n```", section, flags=re.DOTALL)

    assert blocks == [printed()], "docs/recovery.md out of date: paste `manage.py state_diagram`"
    assert f"\n{printed('--table')}\n" in f"{section}\n", (
        "docs/recovery.md out of date: paste `manage.py state_diagram --table`"
    )
