"""A comment or a docstring that names a module of the product names one that exists: a move
or a rename that leaves the old name in prose fails here, as an import would.

What counts as a mention (in the comments and the docstrings of product modules,
tests/packages.py; migrations left out):

- a path ending in `.py` (`automation/intake/services.py`, `intake/services.py`), with its
  `::name` if it has one. A path is found from the top of the checkout, from the mentioning
  module's package or folder, or from `automation/` (a concern's path, `pipeline/decide.py`);
  `::name` must be defined in it.
- a dotted path from a product package through one of its modules
  (`automation.recovery.selectors.QUEUE_SLA`): the module must exist, and the name after it,
  if any, be defined or imported there. A dotted name with only the package before it
  (`automation.work_queue`, a permission) is not a module path and is not checked.

The pages in docs/ are held to the same for what they quote in backticks from the top of the
checkout: a path that starts with a product package (`accounts/oidc.py`), with its `::name`,
and a dotted module path. A page's path relative to a table row is the architecture map's to
check (tests/test_architecture_map.py).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.packages import REPO, product_packages, product_sources

PATH = re.compile(r"(?<![\w./-])((?:\w+/)+\w+\.py)(?:::(\w+))?")
PACKAGES = "|".join(sorted(product_packages()))
DOTTED = re.compile(rf"(?<![\w./-])((?:{PACKAGES})(?:\.\w+)+)")


def prose(source: str) -> str:
    """The comments and the docstrings (any string standing as a statement) of a module."""
    comments = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    strings = [
        node.value.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    return "\n".join([*comments, *strings])


def defines(module: Path, name: str) -> bool:
    source = module.read_text()
    return bool(
        re.search(
            rf"^\s*(?:async def|def|class) {name}\b|^\s*{name}\s*[:=]|^\s*{name},?\s*(?:#.*)?$"
            rf"|^from \S+ import [^\n]*\b{name}\b",
            source,
            re.MULTILINE,
        )
    )


def path_candidates(mentioned: str, here: Path) -> Iterator[Path]:
    yield REPO / mentioned
    folder = here.parent
    while folder != REPO:
        yield folder / mentioned
        folder = folder.parent
    yield REPO / "automation" / mentioned


def module_of(dotted: str) -> tuple[Path, list[str]] | None:
    """The longest leading part of `dotted` that is a module below a product package, and
    the names after it; None when only the package itself is found."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        base = REPO.joinpath(*parts[:end])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.is_file():
                return module, parts[end:]
    return None


def stale_mentions(source: str, here: Path) -> list[str]:
    text = prose(source)
    stale = []
    for match in PATH.finditer(text):
        mentioned, name = match.groups()
        found = [path for path in path_candidates(mentioned, here) if path.is_file()]
        if not found:
            stale.append(mentioned)
        elif name and not any(defines(path, name) for path in found):
            stale.append(f"{mentioned}::{name}")
    for match in DOTTED.finditer(text):
        dotted = match.group(1)
        resolved = module_of(dotted)
        if resolved is None:
            continue  # only the package: a permission or a label, not a module path
        module, names = resolved
        if names and not defines(module, names[0]) and not (module.parent / names[0]).exists():
            stale.append(dotted)
    return stale


def test_every_module_a_comment_or_docstring_names_exists() -> None:
    stale = {
        f"{path.relative_to(REPO)}: {mention}"
        for path in product_sources()
        for mention in stale_mentions(path.read_text(), path)
    }
    assert sorted(stale) == []


# Modules a page names on purpose though they are gone: the history it records.
RETIRED = {
    "config/sql.py": "docs/performance.md measures the intake that replaced it",
    "core/round_trip.py": "docs/performance.md says what replaced it",
}
QUOTED = re.compile(rf"`((?:{PACKAGES})/[\w/]+\.py)(?:::(\w+))?`|`((?:{PACKAGES})(?:\.\w+)+)`")


def stale_in_page(text: str) -> list[str]:
    stale = []
    for match in QUOTED.finditer(text):
        mentioned, name, dotted = match.groups()
        if mentioned in RETIRED:
            continue
        if mentioned is not None:
            module = REPO / mentioned
            if not module.is_file():
                stale.append(mentioned)
            elif name and not defines(module, name):
                stale.append(f"{mentioned}::{name}")
            continue
        resolved = module_of(dotted)
        if resolved is not None:
            module, names = resolved
            if names and not defines(module, names[0]) and not (module.parent / names[0]).exists():
                stale.append(dotted)
    return stale


def test_every_module_a_page_of_the_docs_names_exists() -> None:
    stale = [
        f"{page.name}: {mention}"
        for page in sorted((REPO / "docs").glob("*.md"))
        for mention in stale_in_page(page.read_text())
    ]
    assert stale == []


def test_a_page_naming_a_module_that_is_gone_is_found() -> None:
    page = (
        "`automation/pipeline/decide.py::step_decide` is there; `console/admin/automation.py`,"
        " `automation/pipeline/services.py::step_gone` and `automation.effects.get_adapter`"
        " are not; `config/sql.py` is history."
    )
    assert stale_in_page(page) == [
        "console/admin/automation.py",
        "automation/pipeline/services.py::step_gone",
        "automation.effects.get_adapter",
    ]


def test_a_mention_of_a_module_that_is_gone_is_found() -> None:
    here = REPO / "automation" / "mail.py"
    source = (
        '"""Read by `automation/intake/services.py::intake_submit`, the caller\n'
        "(`services/intake.py`), and automation.runs.selectors.QUEUE_SLA.\n"
        '"""\n'
        "# see pipeline/decide.py::step_decide and automation.pipeline.gone.run_advance\n"
        "x = policy.signals.get('not prose')\n"
    )
    assert sorted(stale_mentions(source, here)) == [
        "automation.pipeline.gone.run_advance",
        "automation.runs.selectors.QUEUE_SLA",
        "services/intake.py",
    ]
