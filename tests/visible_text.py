"""The text of a page as a person reads it: what codes does it show as primary text?

Codes may appear only as secondary text: inside `<small class="code">`, inside `<code>`, or
in attributes (a `title` on hover, a `data-testid`, a form value). `visible_text` drops those,
and scripts and styles, and keeps every other piece of text (an SVG `<title>` tooltip
included: a chart's tooltip is read as words too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip
HIDDEN = {"script", "style", "code", "template"}


def _secondary(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    if tag in HIDDEN:
        return True
    classes = (dict(attrs).get("class") or "").split()
    return tag == "small" and "code" in classes


class _Visible(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, bool]] = []  # (tag, hides its text)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append((tag, _secondary(tag, attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass  # <br/>, <rect .../>: no text

    def handle_endtag(self, tag: str) -> None:
        if not any(name == tag for name, _ in self.open):
            return  # a stray end tag closes nothing
        while self.open:
            name, _ = self.open.pop()
            if name == tag:
                return

    def handle_data(self, data: str) -> None:
        if not any(hidden for _, hidden in self.open):
            self.parts.append(data)


def visible_text(html: str) -> str:
    """The page's primary text, whitespace collapsed: no tags, attributes, scripts, styles,
    `<code>` or `<small class="code">` text."""
    parser = _Visible()
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(parser.parts).split())


def codes_shown(html: str, codes: Iterable[str]) -> list[str]:
    """The codes, in the order given, that the page shows as primary text (as a whole word:
    `risk_signal` is not found in `risk_signals`)."""
    text = visible_text(html)
    return [c for c in codes if re.search(rf"(?<!\w){re.escape(c)}(?!\w)", text)]
