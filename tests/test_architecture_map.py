"""docs/architecture.md's "Where is X?" table names files that exist and functions defined in
them: the map is checked like code, so a move or a rename that forgets it fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "architecture.md"


def rows() -> list[tuple[str, list[str], list[str]]]:
    text = MAP.read_text()
    table = text.split("## Where is X?", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("behaviour", "---"):
            continue
        files = re.findall(r"`([^`]+)`", cells[1])
        names = [re.sub(r"\s*\(SQL\)$", "", name) for name in re.findall(r"`([^`]+)`", cells[2])]
        found.append((cells[0], files, names))
    return found


def test_the_map_has_about_thirty_behaviours() -> None:
    assert len(rows()) >= 30


def test_every_file_exists_and_every_name_is_defined_in_one_of_them() -> None:
    missing = []
    for behaviour, files, names in rows():
        sources = []
        for name in files:
            path = ROOT / name
            if not path.is_file():
                missing.append(f"{behaviour}: no file {name}")
                continue
            sources.append(path.read_text())
        for name in names:
            defined = re.compile(
                rf"^\s*(?:def|class|async def) {re.escape(name)}\b"
                rf"|^{re.escape(name)}\s*[:=]"
                rf"|FUNCTION {re.escape(name)}\(",
                re.MULTILINE,
            )
            if not any(defined.search(source) for source in sources):
                missing.append(f"{behaviour}: {name} is defined in none of {files}")
    assert missing == []


def test_the_map_names_no_private_function() -> None:
    private = [
        (behaviour, name)
        for behaviour, _, names in rows()
        for name in names
        if name.startswith("_")
    ]
    assert private == []
