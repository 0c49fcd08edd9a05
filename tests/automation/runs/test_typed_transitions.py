"""Transitions are called as bound methods, never looked up by name, and each is recorded
under its own audit action."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from audit.models import APPROVAL_ACTIONS, AuditAction, AuditEvent
from automation.models import IntakeChannel, IntakeRecord, Outcome, Run, State
from automation.runs.journal import TRANSITION_ACTIONS, record_transition
from tests.automation.runs.test_transitions import DECLARED
from tests.packages import product_sources

REPO = Path(__file__).resolve().parents[3]
TRANSITIONS = frozenset(DECLARED)
# Calls that reach an attribute by a name held in a string.
BY_NAME = frozenset({"getattr", "setattr", "hasattr", "methodcaller", "attrgetter"})
# Calls that take a transition: record_transition(run, <transition>), the others (<transition>).
# `move` was the string dispatcher record_transition replaced: move(run, "hold").
TAKES_TRANSITION = {"record_transition": 1, "move": 1, "has_transition_perm": 0, "can_proceed": 0}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _names_a_run(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name.endswith("run") or name in {"locked", "original", "replay"}


def _is_transition(node: ast.expr, locals_: dict[str, ast.expr]) -> bool:
    """`run.hold`, `run.a if ... else run.b`, or a local name bound to one of those."""
    if isinstance(node, ast.Attribute):
        return node.attr in TRANSITIONS
    if isinstance(node, ast.IfExp):
        return _is_transition(node.body, locals_) and _is_transition(node.orelse, locals_)
    if isinstance(node, ast.Name) and node.id in locals_:
        return _is_transition(locals_[node.id], locals_)
    return False


def _local_bindings(tree: ast.AST) -> dict[str, ast.expr]:
    return {
        target.id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def string_dispatch(source: str) -> list[str]:
    """Every place in this source that reaches a run's transition by a string."""
    found = []
    tree = ast.parse(source)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for scope in [tree, *functions]:
        locals_ = _local_bindings(scope)
        for call in (n for n in ast.walk(scope) if isinstance(n, ast.Call)):
            name, args = _called(call), call.args
            named = [a.value for a in args if isinstance(a, ast.Constant)]
            if name in BY_NAME and (
                (args and _names_a_run(args[0])) or TRANSITIONS.intersection(map(str, named))
            ):
                found.append(f"line {call.lineno}: {name}(...)")
            position = TAKES_TRANSITION.get(name, len(args))
            if name == "move" and not (args and _names_a_run(args[0])):
                continue  # another thing's move (an IMAP client's messages to a folder)
            if position < len(args) and not _is_transition(args[position], locals_):
                found.append(f"line {call.lineno}: {name} without a bound transition")
    return sorted(set(found))


def test_the_check_finds_string_dispatch() -> None:
    bad = """
def step(run, name, other):
    getattr(run, name)()
    getattr(other, "hold")()
    record_transition(run, name)
    has_transition_perm(getattr(run, "abandon"), user)
    move(run, "hold", outcome=outcome)
"""
    assert string_dispatch(bad) == [
        "line 3: getattr(...)",
        "line 4: getattr(...)",
        "line 5: record_transition without a bound transition",
        "line 6: getattr(...)",
        "line 6: has_transition_perm without a bound transition",
        "line 7: move without a bound transition",
    ]
    good = """
def step(run, done):
    transition = run.resolve_by_hand if done else run.abandon
    record_transition(run, transition, finished_at=now)
    record_transition(run, run.hold, outcome=outcome)
    can_proceed(run.retry_effect)
    client.move([uid], "Processed")
"""
    assert string_dispatch(good) == []


def test_no_product_code_calls_a_transition_by_its_name() -> None:
    sources = list(product_sources())
    assert len(sources) > 50
    found = {
        str(path.relative_to(REPO)): problems
        for path in sources
        if (problems := string_dispatch(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_every_transition_is_recorded_under_an_audit_action_of_its_own() -> None:
    assert set(TRANSITION_ACTIONS) == TRANSITIONS
    assert {action.value for action in TRANSITION_ACTIONS.values()} == {
        f"run.{name}" for name in TRANSITIONS
    }
    assert all(isinstance(action, AuditAction) for action in TRANSITION_ACTIONS.values())


def test_approval_actions_share_the_prefix_the_trail_is_filtered_by() -> None:
    approval = {a for a in AuditAction if a.name.startswith("APPROVAL_")}
    assert approval == {a for a in AuditAction if a.value.startswith(APPROVAL_ACTIONS)}
    # decided, sent back, expired, escalated; and who holds one: claimed, assigned, released
    assert len(approval) == 8


@pytest.fixture
def run(db: None) -> Run:
    channel = IntakeChannel.objects.create(
        name="typed", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    intake = IntakeRecord.objects.create(
        channel=channel, raw=b"{}", content_type="application/json", source="test"
    )
    return Run.objects.create(
        channel=channel,
        intake=intake,
        event_id="evt-typed",
        state=State.ENRICHED,
        workflow_version="workflow-1",
        classifier_version="recorded-classifier-1",
        prompt_version="prompt-1",
    )


def test_a_transition_is_audited_and_logged_under_its_method_name(run: Run) -> None:
    record_transition(run, run.hold, outcome=Outcome.RETRY_EXHAUSTED, field="classifier")

    event = AuditEvent.objects.get(run=run)
    assert (event.action, event.from_state, event.to_state) == (
        AuditAction.RUN_HOLD,
        State.ENRICHED,
        State.NEEDS_REVIEW,
    )
    assert Run.objects.get(pk=run.pk).state == State.NEEDS_REVIEW


def test_a_transition_of_another_run_is_refused_before_anything_changes(run: Run) -> None:
    other = Run.objects.get(pk=run.pk)

    with pytest.raises(ValueError, match="not a transition of run"):
        record_transition(run, other.hold, outcome=Outcome.RETRY_EXHAUSTED)

    assert (run.state, other.state) == (State.ENRICHED, State.ENRICHED)
    assert not AuditEvent.objects.filter(run=run).exists()
