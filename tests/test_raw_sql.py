"""The product's own SQL and caches are listed, and no private Django name is imported.

Every statement the product sends past the ORM (a cursor's execute, RawSQL, Manager.raw, a
database function or trigger a migration creates) has a row of kind SQL in the table "Speed
tricks that stay" of docs/performance.md: what it is, its file, the function it is in
("module" for a migration's statements), why it stays and the test that guards it. A new one
without a row fails here; so does a row whose function no longer holds one, a cache row
whose name the file no longer defines, or a row whose test does not exist.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.packages import product_packages

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
HEADING = "## Speed tricks that stay"
RAW = re.compile(
    r"cursor\(\)\.execute\(|cursor\.execute\(|objects\.raw\(|\bRawSQL\(|\.raw\(\s*[A-Z_]+\s*[,)]"
    r"|CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|TRIGGER)",
    re.IGNORECASE,
)
PRIVATE = re.compile(
    r"^\s*(?:from\s+django[\w.]*\.sql\b|import\s+django[\w.]*\.sql\b"
    r"|from\s+django[\w.]*\s+import\s+(?:\(?[^#\n]*\b_\w+)"
    r"|from\s+django(?:\.\w+)*\._\w+|import\s+django(?:\.\w+)*\._\w+)",
    re.MULTILINE,
)


def product_files() -> list[Path]:
    return sorted(path for package in product_packages() for path in (ROOT / package).rglob("*.py"))


def enclosing(tree: ast.Module, line: int) -> str:
    """The outermost function holding the line, "module" outside any (a migration's SQL)."""
    for node in tree.body:
        inside = [node]
        if isinstance(node, ast.ClassDef):
            inside = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for item in inside:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                item.lineno <= line <= (item.end_lineno or item.lineno)
            ):
                return item.name
    return "module"


def raw_sql_found() -> dict[tuple[str, str], list[int]]:
    """Each (file, function) holding raw SQL, with the lines."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in product_files():
        text = path.read_text()
        if not RAW.search(text):
            continue
        tree = ast.parse(text)
        for match in RAW.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = (str(path.relative_to(ROOT)), enclosing(tree, line))
            found.setdefault(where, []).append(line)
    return found


def table_rows() -> list[dict[str, str]]:
    """The rows of the table under HEADING, by their column names."""
    section = DOC.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def unquoted(cell: str) -> str:
    return cell.strip().strip("`")


def listed(kind: str = "SQL") -> dict[tuple[str, str], dict[str, str]]:
    return {
        (unquoted(row["file"]), unquoted(row["name"])): row
        for row in table_rows()
        if row["kind"] == kind
    }


def test_the_table_is_found_and_names_its_columns() -> None:
    rows = table_rows()
    assert rows, f"no rows under {HEADING!r} in {DOC}"
    columns = {"kind", "what", "file", "name", "why it stays (measured gain)", "guarded by"}
    assert set(rows[0]) == columns
    assert all(row["why it stays (measured gain)"] for row in rows)
    assert {row["kind"] for row in rows} <= {"SQL", "cache"}


def test_every_raw_statement_of_the_product_has_a_row() -> None:
    missing = [
        f"{file}:{lines[0]} ({function})"
        for (file, function), lines in raw_sql_found().items()
        if (file, function) not in listed()
    ]
    assert missing == [], f"raw SQL with no row in {DOC.name} ({HEADING}): {missing}"


def test_every_row_names_raw_sql_that_is_there() -> None:
    found = raw_sql_found()
    stale = [f"{file} ({function})" for file, function in listed() if (file, function) not in found]
    assert stale == [], f"rows of {DOC.name} naming no raw SQL: {stale}"


def test_every_cache_row_names_a_module_level_name_of_its_file() -> None:
    stale = []
    for file, name in listed("cache"):
        tree = ast.parse((ROOT / file).read_text())
        names = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        if name not in names:
            stale.append(f"{file} ({name})")
    assert stale == [], f"cache rows of {DOC.name} naming nothing: {stale}"


@pytest.mark.parametrize("row", table_rows(), ids=lambda row: unquoted(row["name"]))
def test_each_row_names_a_test_that_exists(row: dict[str, str]) -> None:
    file, _, name = unquoted(row["guarded by"]).partition("::")
    path = ROOT / file
    assert path.is_file(), file
    assert re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.MULTILINE), row


def test_the_scan_sees_what_it_looks_for() -> None:
    """The patterns match the forms the product uses, and not the ORM's own names."""
    for text in (
        'cursor.execute("SELECT 1")',
        "Run.objects.raw(QUERY, [1])",
        "RawSQL(sql, ())",
        "CREATE OR REPLACE FUNCTION f()",
        "CREATE TRIGGER t",
    ):
        assert RAW.search(text), text
    for text in ("fact.raw().filter(x=1)", "Run.objects.filter(pk=1)", "bytes(intake.raw)"):
        assert not RAW.search(text), text


def test_no_product_module_imports_a_private_django_name() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in product_files()
        for match in PRIVATE.finditer(path.read_text())
    ]
    assert found == [], found


def test_the_private_name_check_sees_what_it_looks_for() -> None:
    for text in (
        "from django.db.models.sql import Query",
        "from django.db.models.sql.compiler import SQLCompiler",
        "from django.utils.functional import _lazy_proxy",
        "from django.db.models import F, _Private",
        "import django.db.models.sql",
    ):
        assert PRIVATE.search(text), text
    for text in (
        "from django.db.models import F, Q",
        "from django.db import connection",
        "from django.db.models.fields.json import KeyTextTransform",
    ):
        assert not PRIVATE.search(text), text
