"""The tests that walk the product take its packages from one list (tests/packages.py):
no test names them by hand, so none can leave one out, and a listed folder that is gone
fails instead of being walked as nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.packages import REPO, product_packages, root_packages


def test_every_listed_package_is_a_folder_and_a_missing_one_fails(tmp_path: Path) -> None:
    assert {"core", "automation", "notifications", "console"} <= set(product_packages())
    (tmp_path / "present").mkdir()
    (tmp_path / "present" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_packages = ["present", "gone"]\n'
    )
    with pytest.raises(AssertionError, match="gone"):
        root_packages(tmp_path / "pyproject.toml")


def hand_lists(source: str, packages: set[str]) -> list[int]:
    """Lines of a module constant (a tuple, list or set) that spells three or more package
    names: a list of packages to walk, written by hand."""
    return [
        node.lineno
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and isinstance(node.value, ast.Tuple | ast.List | ast.Set)
        and sum(isinstance(e, ast.Constant) and e.value in packages for e in node.value.elts) >= 3
    ]


def test_the_check_finds_a_hand_written_list() -> None:
    packages = set(root_packages())
    assert hand_lists('PRODUCT = ("core", "audit", "policy")\n', packages) == [1]
    assert hand_lists('PAIR = ("core", "audit")\nOTHER = ["a", "b", "c"]\n', packages) == []


def test_no_test_lists_the_packages_by_hand() -> None:
    packages = set(root_packages())
    found = {
        str(path.relative_to(REPO)): lines
        for path in sorted((REPO / "tests").rglob("*.py"))
        if (lines := hand_lists(path.read_text(encoding="utf-8"), packages))
    }
    assert found == {}
