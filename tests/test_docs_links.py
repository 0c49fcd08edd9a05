"""The README and the pages in docs/ link only to what exists.

For README.md and every docs/*.md: each relative Markdown link names a file or folder in the
repository, each `#anchor` (in the same file or another .md file) names a heading of its
target by GitHub's heading slugs, and the README stays a front door of at most 150 lines.
Web and mail links (`http:`, `https:`, `mailto:`) are not followed: there is no network here.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
SKIPPED_SCHEMES = {"http", "https", "mailto"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:name|id)=[\"']([^\"']+)[\"']", re.IGNORECASE)
# [text](destination "title") and ![alt](destination); the text may hold one level of [].
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
    r"\(\s*(<[^>\n]*>|[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)", re.MULTILINE)
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def without_fences(text: str) -> list[str]:
    """The file's lines with fenced code blocks blanked (line numbers stay as they are)."""
    lines, fence = [], ""
    for line in text.split("\n"):
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            lines.append("")
        elif match:
            fence = match.group(1)
            lines.append("")
        else:
            lines.append(line)
    return lines


def blank_code_spans(text: str) -> str:
    """Code spans blanked, newlines kept, so a link-like text inside one is never a link."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def heading_text(raw: str) -> str:
    """A heading as GitHub renders it to text: code, links, images and emphasis unwrapped."""
    text = re.sub(r"(`+)(.*?)\1", r"\2", raw)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*{1,3})(\S(?:.*?\S)?)\1", r"\2", text)
    text = re.sub(r"(?<![\w])(_{1,3})(\S(?:.*?\S)?)\1(?![\w])", r"\2", text)
    return text.strip()


def slug(raw: str) -> str:
    """GitHub's slug of a heading: lowercase, punctuation except - and _ dropped, each space
    a hyphen."""
    text = heading_text(raw).lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor GitHub makes for the headings of a Markdown text, duplicates numbered."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    lines = without_fences(text)
    for number, line in enumerate(lines):
        match = HEADING.match(line)
        if match:
            title = match.group(2)
        elif (
            number > 0
            and SETEXT_UNDERLINE.match(line)
            and lines[number - 1].strip()
            and not lines[number - 1].lstrip().startswith(("-", "*", "+", "|", ">"))
            and not HEADING.match(lines[number - 1])
        ):
            title = lines[number - 1]
        else:
            continue
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(HTML_ANCHOR.findall("\n".join(lines)))
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line number, destination) of every inline link, image and reference definition."""
    prose = blank_code_spans("\n".join(without_fences(text)))
    matches = [m for p in (INLINE_LINK, REFERENCE_DEFINITION) for m in p.finditer(prose)]
    return [
        (prose.count("\n", 0, m.start(1)) + 1, m.group(1).strip("<>"))
        for m in sorted(matches, key=lambda m: m.start(1))
    ]


def problems(document: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of one document, one line each (none: all resolve)."""
    text = document.read_text(encoding="utf-8")
    name = document.relative_to(root).as_posix()
    found = []
    for line, destination in links(text):
        where = f"{name}:{line}: ({destination})"
        scheme = SCHEME.match(destination)
        if scheme:
            if scheme.group(1).lower() not in SKIPPED_SCHEMES:
                found.append(f"{where}: a {scheme.group(1)}: link is neither relative nor web")
            continue
        if destination.startswith("//"):
            continue  # protocol-relative: a web address
        path, _, fragment = destination.partition("#")
        path = unquote(path)
        if not path:
            target = document
        elif path.startswith("/"):
            target = (root / path.lstrip("/")).resolve()
        else:
            target = (document.parent / path).resolve()
        if not target.is_relative_to(root.resolve()):
            found.append(f"{where}: points outside the repository")
            continue
        if not target.exists():
            found.append(f"{where}: no such file {target.relative_to(root.resolve())}")
            continue
        if not (fragment and target.is_file() and target.suffix == ".md"):
            continue  # no anchor, or one in a file that is not Markdown (e.g. a line, #L10)
        if unquote(fragment) not in anchors(target.read_text(encoding="utf-8")):
            found.append(f"{where}: no heading #{fragment} in {target.name}")
    return found


def test_every_page_is_checked() -> None:
    names = [path.relative_to(ROOT).as_posix() for path in documents()]
    assert names[0] == "README.md"
    assert "docs/architecture.md" in names and "docs/performance.md" in names


@pytest.mark.parametrize("document", documents(), ids=lambda path: path.name)
def test_every_relative_link_and_anchor_resolves(document: Path) -> None:
    assert problems(document) == []


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move detail to docs/"
    )


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Settings (environment)", "settings-environment"),
        ("The chaos soak (`make soak`)", "the-chaos-soak-make-soak"),
        ("While an effect's system is down", "while-an-effects-system-is-down"),
        ("Logging in", "logging-in"),
        ("What a person can do to a run", "what-a-person-can-do-to-a-run"),
        ("`GATEHOUSE_Q_SERVES` and **bulk**", "gatehouse_q_serves-and-bulk"),
        ("Pages at (`make bench-pages`)", "pages-at-make-bench-pages"),
        ("A — b, c. d? [e](f.md)", "a--b-c-d-e"),
        ("Größe und Über", "größe-und-über"),
    ],
)
def test_slugs_are_githubs(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_a_repeated_heading_gets_a_number() -> None:
    text = "# Notes\n\n## Notes\n\n```sh\n# Notes\n```\n\n### Notes\n\nOther\n=====\n"
    assert anchors(text) == {"notes", "notes-1", "notes-2", "other"}


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Two words\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "# Front\n\n## Here\n\n"
        "[fine](docs/page.md), [fine](docs/page.md#two-words), [fine](#here), "
        "[fine](https://example.com/x.md), [fine](mailto:someone@example.com),\n"
        "[gone](docs/missing.md), [no anchor](docs/page.md#three-words), [no anchor](#there),\n"
        "[outside](../elsewhere.md), ![no image](docs/shot.png)\n\n"
        "`[in code](docs/nothing.md)`\n\n```md\n[in a block](docs/nothing.md)\n```\n\n"
        "[ref]: docs/unknown.md\n",
        encoding="utf-8",
    )

    found = problems(tmp_path / "README.md", root=tmp_path)

    assert [line.rsplit(": ", 1)[0] for line in found] == [
        "README.md:6: (docs/missing.md)",
        "README.md:6: (docs/page.md#three-words)",
        "README.md:6: (#there)",
        "README.md:7: (../elsewhere.md)",
        "README.md:7: (docs/shot.png)",
        "README.md:15: (docs/unknown.md)",
    ]
    assert "no heading #three-words in page.md" in found[1]
    assert "outside the repository" in found[3]
