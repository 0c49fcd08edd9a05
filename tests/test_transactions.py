"""Entry-point services own their transaction (durable); what they compose runs inside it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.db import transaction

from automation.pipeline.operations import sweep_due
from policy.services import policy_version_activate
from tests.packages import automation_concerns

REPO = Path(__file__).resolve().parents[1]
SERVICES = [
    *sorted(p for c in automation_concerns() for p in (REPO / "automation" / c).glob("*.py")),
    REPO / "approvals" / "services.py",
    REPO / "policy" / "services.py",
    REPO / "reports" / "rollups.py",
]


def atomic_blocks(source: str) -> list[tuple[int, bool]]:
    """Each transaction.atomic in the source: its line, and whether it is durable."""
    found: dict[int, tuple[int, bool]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _is_atomic(node.func):
            durable = any(keyword.arg == "durable" for keyword in node.keywords)
            found[id(node.func)] = (node.lineno, durable)
        elif _is_atomic(node) and id(node) not in found:
            found.setdefault(id(node), (getattr(node, "lineno", 0), False))
    return sorted(found.values())


def _is_atomic(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "atomic"
        and isinstance(node.value, ast.Name)
        and node.value.id == "transaction"
    )


def test_every_transaction_a_service_opens_is_durable_or_a_savepoint_it_explains() -> None:
    durable = 0
    unexplained = []
    for path in SERVICES:
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for line, is_durable in atomic_blocks(source):
            durable += is_durable
            said = " ".join(lines[max(line - 3, 0) : line]).lower()
            if not is_durable and "savepoint" not in said:
                unexplained.append(f"{path.relative_to(REPO)}:{line}")
    assert unexplained == []
    assert durable > 30


def test_the_check_tells_durable_blocks_from_savepoints() -> None:
    source = """
@transaction.atomic
def a(): ...
def b():
    with transaction.atomic(durable=True):
        with transaction.atomic():
            pass
"""
    assert atomic_blocks(source) == [(2, False), (5, True), (6, False)]


@pytest.mark.django_db
def test_an_entry_point_refuses_to_run_inside_another_transaction() -> None:
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        sweep_due()
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        policy_version_activate(name="policy-1")
