"""The text of a list page's rows, as a person reads it: each cell's whole text, and its
primary text (without the codes shown as secondary text, `<small class="code">`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Cell:
    text: str = ""
    primary: str = ""


@dataclass
class Row:
    testid: str
    cells: list[Cell] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(cell.text for cell in self.cells)


class _Rows(HTMLParser):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.rows: list[Row] = []
        self.row: Row | None = None
        self.cell: Cell | None = None
        self.secondary = 0  # depth inside <small class="code">

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and (found.get("data-testid") or "").startswith(self.prefix):
            self.row = Row(found["data-testid"] or "")
            self.rows.append(self.row)
        elif tag == "td" and self.row is not None:
            self.cell = Cell()
            self.row.cells.append(self.cell)
        elif tag == "small" and self.cell is not None and (self.secondary or _code(found)):
            self.secondary += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "small" and self.secondary:
            self.secondary -= 1
        elif tag == "td":
            self.cell = None
        elif tag == "tr":
            self.row = None

    def handle_data(self, data: str) -> None:
        if self.cell is None:
            return
        self.cell.text = _squash(self.cell.text + data)
        if not self.secondary:
            self.cell.primary = _squash(self.cell.primary + data)


def _code(attrs: dict[str, str | None]) -> bool:
    return "code" in (attrs.get("class") or "").split()


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).lstrip()


def rows(html: str, prefix: str) -> list[Row]:
    """The rows whose data-testid starts with `prefix` (`inbox-row-`, `queue-row-`)."""
    parser = _Rows(prefix)
    parser.feed(html)
    for row in parser.rows:
        for cell in row.cells:
            cell.text, cell.primary = cell.text.strip(), cell.primary.strip()
    return parser.rows
