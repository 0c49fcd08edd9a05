"""Every status moves through its model: no product module assigns a `status` or `state`
attribute, sets one by name, or moves one by a queryset's update(), outside the models'
transition methods and the one named claim of a job claimed by a conditional update
(automation.classifiers.models.WorkerJob.claim, whose comment says why it is no lock).

A row is still made with its first status (`create(status=...)`): that is no move.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packages import REPO, product_sources

STATUS_NAMES = frozenset({"status", "state"})
# Bulk writers a status may not be passed to as a keyword.
UPDATES = frozenset({"update", "update_or_create"})
# (module, class, function): the one place per model a status moves without a transition.
NAMED_CLAIMS = frozenset({("automation/classifiers/models.py", "WorkerJob", "claim")})


@dataclass(frozen=True)
class Move:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _is_transition(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method decorated with django-fsm's @transition(...)."""
    for decorator in node.decorator_list:
        call = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
        if name == "transition":
            return True
    return False


def _status_targets(node: ast.AST) -> Iterator[str]:
    for target in ast.walk(node):
        if isinstance(target, ast.Attribute) and target.attr in STATUS_NAMES:
            yield target.attr


def _moves_in(node: ast.AST, path: str) -> Iterator[Move]:
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in _status_targets(target):
                yield Move(path, node.lineno, f"assigns .{name}")
    if not isinstance(node, ast.Call):
        return
    func = node.func
    if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
        name = node.args[1]
        if isinstance(name, ast.Constant) and name.value in STATUS_NAMES:
            yield Move(path, node.lineno, f"setattr(..., {name.value!r}, ...)")
    if isinstance(func, ast.Attribute) and func.attr in UPDATES:
        for keyword in node.keywords:
            if keyword.arg in STATUS_NAMES:
                yield Move(path, node.lineno, f".{func.attr}({keyword.arg}=...)")


class _Walker(ast.NodeVisitor):
    """Finds status moves, skipping the bodies of transition methods and named claims."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.classes: list[str] = []
        self.moves: list[Move] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        owner = self.classes[-1] if self.classes else ""
        if _is_transition(node) or (self.path, owner, node.name) in NAMED_CLAIMS:
            return
        self.generic_visit(node)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def generic_visit(self, node: ast.AST) -> None:
        self.moves.extend(_moves_in(node, self.path))
        super().generic_visit(node)


def status_moves(source: str, path: str) -> list[Move]:
    walker = _Walker(path)
    walker.visit(ast.parse(source, filename=path))
    return walker.moves


def test_no_product_module_moves_a_status_outside_its_model() -> None:
    moves = [
        move
        for source in product_sources()
        for move in status_moves(
            source.read_text(encoding="utf-8"), source.relative_to(REPO).as_posix()
        )
    ]

    assert not moves, "a status moves outside its model's transitions:\n" + "\n".join(
        map(str, moves)
    )


def test_the_named_claims_are_still_there() -> None:
    """A named claim that was renamed or moved would leave this rule excusing nothing."""
    for path, owner, function in NAMED_CLAIMS:
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        found = [
            node
            for cls in ast.walk(tree)
            if isinstance(cls, ast.ClassDef) and cls.name == owner
            for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name == function
        ]
        assert found, f"{path}: {owner}.{function} is gone"


PLANTED = """
from django_fsm import transition

class Effect:
    @transition(field="status", source="pending", target="delivered")
    def deliver(self):
        self.status = "delivered"  # inside a transition: allowed

def effect_mark(effect, rows, run):
    effect.status = "delivered"
    setattr(run, "state", "completed")
    rows.filter(pk=1).update(status="sent")
    effect.status, effect.attempts = "rejected", 2
"""


def test_the_check_catches_a_planted_assignment() -> None:
    moves = status_moves(PLANTED, "planted.py")

    assert [(move.line, move.what) for move in moves] == [
        (10, "assigns .status"),
        (11, "setattr(..., 'state', ...)"),
        (12, ".update(status=...)"),
        (13, "assigns .status"),
    ]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("effect.status_reason = 'x'\n", id="another attribute"),
        pytest.param("Effect.objects.create(status='pending')\n", id="a first status"),
        pytest.param("rows.filter(status='pending').count()\n", id="a read"),
        pytest.param("status = effect.status\n", id="a local name"),
    ],
)
def test_the_check_leaves_what_moves_no_status(source: str) -> None:
    assert status_moves(source, Path("planted.py").as_posix()) == []
