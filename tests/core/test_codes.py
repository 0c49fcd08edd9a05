"""Every code a service refuses with, and every outcome code, is a member of one enum in
core.codes: no app spells one as a bare string or declares its own constant for it."""

from __future__ import annotations

import ast
from pathlib import Path

from core.codes import Outcome, Refusal
from core.errors import ServiceError
from tests.packages import product_sources

ROOT = Path(__file__).resolve().parents[2]
CODES = {str(code) for code in [*Outcome, *Refusal]}


def product_modules() -> list[Path]:
    return list(product_sources())


def refusal_codes_given(tree: ast.AST) -> list[ast.expr]:
    """The first argument of every ServiceError(...) call in the module, and of every
    super().__init__(...) in a class derived from ServiceError."""
    given = [
        node.args[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "ServiceError"
        and node.args
    ]
    for refusal in ast.walk(tree):
        if isinstance(refusal, ast.ClassDef) and any(
            isinstance(base, ast.Name) and base.id == "ServiceError" for base in refusal.bases
        ):
            given += [
                node.args[0]
                for node in ast.walk(refusal)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "__init__"
                and node.args
            ]
    return given


def is_refusal(node: ast.expr) -> bool:
    """Refusal.X, or Refusal(<expression>) (a code read from a status)."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "Refusal"
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Refusal"
    )


def test_every_refusal_is_a_member_of_the_one_enum() -> None:
    bare = [
        f"{path.relative_to(ROOT)}:{code.lineno}"
        for path in product_modules()
        for code in refusal_codes_given(ast.parse(path.read_text()))
        if not is_refusal(code)
    ]
    assert bare == [], f"ServiceError given a code that is not a Refusal: {bare}"


def test_no_app_declares_its_own_constant_for_a_code() -> None:
    declared = []
    for path in product_modules():
        if path == ROOT / "core" / "codes.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value in CODES
            ):
                declared.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.value!r}")
    assert declared == [], f"codes declared outside core.codes: {declared}"


def test_a_refusal_compares_and_serialises_as_its_text() -> None:
    error = ServiceError(Refusal.CLAIMED, "somebody works on it")
    assert error.code == "claimed"
    assert f"{error.code}" == "claimed"
    assert Refusal("approval_stale") is Refusal.APPROVAL_STALE
    assert Refusal.APPROVAL_STALE == Outcome.APPROVAL_STALE
    assert len({code.value for code in Refusal}) == len(Refusal)
