"""docs/architecture.md is checked like code, so a move, a rename or a new module that forgets
it fails here:

- its "Where is X?" table names files that exist and functions defined in them;
- every product module over 100 lines is named in one of its tables, by the rule of
  `named_modules` below;
- every file the apps' and the concerns' tables name exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import pairwise
from pathlib import Path

from tests.packages import product_sources

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


# A module this long is a place a reader looks for; a shorter one is found from its neighbours.
NAMED_ABOVE_LINES = 100


def table_rows(text: str) -> Iterator[tuple[str, list[str]]]:
    """Every body row of every table, with its table's first header cell. A row is one line:
    a table row broken over two lines ends the table in Markdown, and here."""
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells[0]
        elif not set(cells[0]) <= set("-: "):
            yield header, cells


def row_folder(header: str, first_cell: str) -> str | None:
    """The folder a row's short paths are relative to: the app's in "The apps" (first header
    cell `app`), `automation/<concern>/` in the concerns' table; None in any other table."""
    name = re.findall(r"`([^`]+)`", first_cell)
    if not name:
        return None
    if header == "app":
        return f"{name[0]}/"
    if header.startswith("concern"):
        return f"automation/{name[0]}/"
    return None


def table_paths(text: str) -> Iterator[tuple[str | None, str]]:
    """Every backticked path in a table cell after the first, with its row's folder; a
    `path.py::name` counts as its path."""
    for header, cells in table_rows(text):
        folder = row_folder(header, cells[0])
        for cell in cells[1:]:
            for quoted in re.findall(r"`([^`]+)`", cell):
                yield folder, quoted.split("::", 1)[0]


def named_modules(text: str) -> set[str]:
    """The rule: a module is named when a backticked path in a table cell is its full path
    from the checkout's top (`automation/intake/services.py`, anywhere: "Where is X?" names
    only full paths), or, in the row of its app or of its automation concern, its path from
    that folder (`selectors.py` in the `approvals` row, `views/approvals.py` in the `console`
    row, `imap.py` in the `intake` concern's row)."""
    named = set()
    for folder, path in table_paths(text):
        named.add(path)
        if folder is not None:
            named.add(folder + path)
    return named


def unnamed(modules: Iterable[str], text: str) -> list[str]:
    named = named_modules(text)
    return [module for module in modules if module not in named]


def long_modules() -> list[str]:
    """Product modules (tests/packages.py: migrations left out) over NAMED_ABOVE_LINES lines."""
    root = ROOT.as_posix() + "/"
    return [
        path.as_posix().removeprefix(root)
        for path in product_sources()
        if len(path.read_text().splitlines()) > NAMED_ABOVE_LINES
    ]


def test_every_long_product_module_is_named_in_the_map() -> None:
    modules = long_modules()
    assert len(modules) > 50  # the walk found the product
    assert unnamed(modules, MAP.read_text()) == []


def test_a_module_the_map_does_not_name_is_found() -> None:
    text = MAP.read_text()
    assert unnamed(["automation/intake/carrier_pigeon.py"], text) == [
        "automation/intake/carrier_pigeon.py"
    ]
    # A short path counts only in its own app's row, never in another's, nor in another table.
    sample = (
        "| app | holds |\n|---|---|\n| `approvals` | the queries (`selectors.py`) |\n\n"
        "| kind of code | place |\n|---|---|\n| a query | `queries.py` |\n"
    )
    assert unnamed(["approvals/selectors.py"], sample) == []
    assert unnamed(["reports/selectors.py", "approvals/queries.py"], sample) == [
        "reports/selectors.py",
        "approvals/queries.py",
    ]


def test_every_file_the_apps_and_concerns_tables_name_exists() -> None:
    gone = [
        folder + path
        for folder, path in table_paths(MAP.read_text())
        if folder is not None
        and path.endswith(".py")
        and not (ROOT / path).is_file()
        and not (ROOT / folder / path).is_file()
    ]
    assert gone == []


def broken_rows(text: str) -> list[str]:
    """Lines that continue a table row on the next line: Markdown ends the table there, so
    the rest of the row, and every row after it, would be read as a paragraph."""
    lines = text.splitlines()
    return [
        line
        for before, line in pairwise(lines)
        if before.startswith("|") and line.strip() and not line.startswith("|")
    ]


def test_every_table_row_is_one_line() -> None:
    assert broken_rows(MAP.read_text()) == []
    assert broken_rows("| app | holds |\n|---|---|\n| `core` | the codes,\nand errors |\n") == [
        "and errors |"
    ]
