"""The run's state machine: only declared transitions, never a direct write, no lost update."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import transaction
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from automation.models import (
    TERMINAL_STATES,
    Checkpoint,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    State,
)

NOW = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
DECIDED = {
    "policy_version": "policy-1",
    "verdict": "execute",
    "route": "service_desk",
    "effect": "create_follow_up",
    "rules": [],
}
DECISION = {
    "category": "support",
    "recommended_route": "service_desk",
    "requested_effect": "create_follow_up",
    "reason_code": "support_request",
    "confidence": None,
}
# The arguments each transition is called with. A transition missing here fails the
# collection check below, so a new transition cannot slip past these tests.
KWARGS: dict[str, dict[str, Any]] = {
    "validate": {"event_id": "evt-1"},
    "normalize": {"normalized": {"event_id": "evt-1"}, "fingerprint": "f" * 64},
    "enrich": {"enrichment": {"account_tier": "standard"}},
    "schedule_classifier_retry": {"next_attempt_at": NOW},
    "classify": {"decision": DECISION},
    "correct_reading": {"decision": DECISION},
    "resume": {"decision": DECISION},
    "replay": {},
    "correct_rejected": {},
    "correct_replay": {"decision": DECISION},
    "send_back": {"reason": "read as a bank change: it is a claim"},
    "require_approval": {"decided": DECIDED},
    "approve": {},
    "invalidate_approval": {"outcome": Outcome.APPROVAL_STALE},
    "refuse_approval": {"outcome": Outcome.APPROVAL_STALE},
    "execute": {"decided": DECIDED},
    "execute_approved": {},
    "reconsider": {},
    "retry_effect": {},
    "retry_stage": {},
    "resolve_by_hand": {"finished_at": NOW},
    "abandon": {"finished_at": NOW},
    "close_exception": {},
    "complete": {"finished_at": NOW},
    "block": {"decided": DECIDED, "finished_at": NOW},
    "hold": {"outcome": Outcome.RETRY_EXHAUSTED, "field": "classifier"},
    "fail": {"outcome": Outcome.INVALID_EVENT, "field": "body", "finished_at": NOW},
}


def _declared() -> dict[str, dict[str, str]]:
    """method name -> {source state: target state}, as django-fsm knows them."""
    table: dict[str, dict[str, str]] = defaultdict(dict)
    for t in Run._meta.get_field("state").get_all_transitions(Run):  # type: ignore[union-attr]
        table[t.name][t.source] = t.target
    return dict(table)


DECLARED = _declared()
LEGAL = [
    (name, source, target) for name, moves in DECLARED.items() for source, target in moves.items()
]
ILLEGAL = [
    (name, state) for name, moves in DECLARED.items() for state in State if state not in moves
]


@pytest.fixture
def intake(db: None) -> IntakeRecord:
    channel = IntakeChannel.objects.create(
        name="transitions", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    return IntakeRecord.objects.create(
        channel=channel, raw=b"{}", content_type="application/json", source="test"
    )


def run_in(intake: IntakeRecord, state: str, outcome: str = "") -> Run:
    run = Run.objects.create(
        channel=intake.channel,
        intake=intake,
        event_id="evt-1",
        state=state,
        outcome=outcome,
        workflow_version="workflow-1",
        classifier_version="recorded-classifier-1",
        prompt_version="prompt-1",
    )
    return Run.objects.get(pk=run.pk)


def row(run: Run) -> dict[str, Any]:
    return Run.objects.values().get(pk=run.pk)


def test_every_transition_has_arguments_and_the_table_covers_every_state() -> None:
    assert set(DECLARED) == set(KWARGS)
    reached = {target for moves in DECLARED.values() for target in moves.values()} - {None}
    assert reached | {State.RECEIVED} == set(State)
    assert len(ILLEGAL) > 100


def test_a_run_can_be_created_in_any_state(intake: IntakeRecord) -> None:
    for state in State:
        assert run_in(intake, state).state == state


@pytest.mark.parametrize(
    ("name", "state"),
    [pytest.param(name, state, id=f"{name}-from-{state}") for name, state in ILLEGAL],
)
def test_illegal_transition_is_refused_and_the_row_is_unchanged(
    intake: IntakeRecord, name: str, state: str
) -> None:
    run = run_in(intake, state)
    before = row(run)

    with pytest.raises(TransitionNotAllowed), transaction.atomic():
        getattr(run, name)(**KWARGS[name])
        run.save()

    assert run.state == state
    assert row(run) == before


@pytest.mark.parametrize(
    ("name", "source", "target"),
    [pytest.param(n, s, t, id=f"{n}-from-{s}") for n, s, t in LEGAL],
)
def test_declared_transition_moves_the_run(
    intake: IntakeRecord, name: str, source: str, target: str
) -> None:
    # retry_effect and retry_stage are only for runs held for those reasons.
    # correct_reading only for holds a reading ends; resume only from a stored reading.
    held_for = {
        "retry_effect": Outcome.EFFECT_UNAVAILABLE,
        "retry_stage": Outcome.RETRY_EXHAUSTED,
        "correct_reading": Outcome.LOW_CONFIDENCE,
        "correct_rejected": Outcome.APPROVAL_REJECTED,  # only a run an approver rejected
    }
    run = run_in(intake, source, held_for.get(name, ""))
    if name == "correct_replay":  # only a replay takes a person's reading in place of one
        run.replay_of = run_in(intake, State.FAILED)
        run.save()
    if name == "resume":
        Checkpoint.objects.create(
            run=run, sequence=1, state=source, versions={}, data={"classification": DECISION}
        )
    version = run.version

    getattr(run, name)(**KWARGS[name])
    run.save()

    # A transition without a target (a replay) leaves the run in the state it was in.
    assert row(run)["state"] == (source if target is None else target)
    assert row(run)["version"] == version + 1


def test_a_hold_by_policy_keeps_what_policy_decided(intake: IntakeRecord) -> None:
    run = run_in(intake, State.CLASSIFIED)
    decided = {**DECIDED, "rules": [{"rule_id": "confidence.support", "passed": False}]}

    run.hold(outcome=Outcome.LOW_CONFIDENCE, field="confidence", decided=decided)
    run.save()

    stored = row(run)
    assert (stored["policy_version"], stored["route"], stored["effect_name"]) == (
        "policy-1",
        "service_desk",
        "create_follow_up",
    )
    assert stored["rules"] == decided["rules"]
    assert (stored["state"], stored["queue"]) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)


def test_a_failure_by_a_rule_keeps_the_rule(intake: IntakeRecord) -> None:
    run = run_in(intake, State.RECEIVED)
    rules = [{"rule_id": "allowed.requested_action", "passed": False}]

    run.fail(
        outcome=Outcome.UNSUPPORTED_REQUEST, field="requested_action", rules=rules, finished_at=NOW
    )
    run.save()

    stored = row(run)
    assert (stored["state"], stored["rules"], stored["policy_version"]) == (
        State.FAILED,
        rules,
        "",
    )


# The moves a terminal run allows stay where it is: a failed run leaves its exception queue
# (acknowledged), and any finished run can be replayed as a new run, never reopened (a
# rejected one also with a person's corrected reading).
STAYS_TERMINAL = {"close_exception", "replay", "correct_rejected"}


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_terminal_state_is_never_left(intake: IntakeRecord, state: str) -> None:
    run = run_in(intake, state)

    available = {t.name: t.target for t in run.get_available_state_transitions()}  # type: ignore[attr-defined]
    assert set(available) <= STAYS_TERMINAL
    assert all(target in (state, None) for target in available.values())
    for name, kwargs in KWARGS.items():
        if name in available:
            continue
        with pytest.raises(TransitionNotAllowed):
            getattr(run, name)(**kwargs)
    assert run.state == state


def test_state_cannot_be_assigned_directly(intake: IntakeRecord) -> None:
    run = run_in(intake, State.RECEIVED)

    with pytest.raises(AttributeError):
        run.state = State.COMPLETED

    assert run.state == State.RECEIVED
    assert row(run)["state"] == State.RECEIVED


def test_state_change_on_a_stale_copy_is_refused(intake: IntakeRecord) -> None:
    first = run_in(intake, State.RECEIVED)
    second = Run.objects.get(pk=first.pk)
    first.validate(event_id="evt-1")
    first.save()
    winner = row(first)

    second.fail(outcome=Outcome.INVALID_EVENT, finished_at=NOW)
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        second.save()

    assert row(first) == winner
    assert winner["state"] == State.VALIDATED


def test_same_state_change_on_a_stale_copy_is_refused_by_the_version(
    intake: IntakeRecord,
) -> None:
    first = run_in(intake, State.ENRICHED)
    second = Run.objects.get(pk=first.pk)
    first.schedule_classifier_retry(next_attempt_at=NOW)
    first.save()
    winner = row(first)

    later = NOW.replace(hour=10)
    second.schedule_classifier_retry(next_attempt_at=later)
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        second.save()

    assert row(first) == winner
    assert winner["next_attempt_at"] == NOW
    assert second.version == winner["version"] - 1  # the refused save gave its bump back


def test_plain_field_change_on_a_stale_copy_is_refused_by_the_version(
    intake: IntakeRecord,
) -> None:
    first = run_in(intake, State.NEEDS_REVIEW)
    second = Run.objects.get(pk=first.pk)
    first.failure_detail = "first writer"
    first.save(update_fields=["failure_detail"])

    second.failure_detail = "second writer"
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        second.save(update_fields=["failure_detail"])

    assert row(first)["failure_detail"] == "first writer"
    assert row(first)["version"] == 1


def test_retry_effect_refuses_a_run_held_for_another_reason(intake: IntakeRecord) -> None:
    held = run_in(intake, State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)
    with pytest.raises(TransitionNotAllowed):
        held.retry_effect()
