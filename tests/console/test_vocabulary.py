"""Every code people can meet has its words, written once; the tables in docs/recovery.md are
those words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import cast

import pytest
from django_fsm import FSMField

from approvals.models import ApprovalStatus
from audit.models import AuditAction
from automation.models import (
    BatchStatus,
    Effect,
    EffectStatus,
    Outcome,
    QAStatus,
    RecoveryKind,
    Run,
    StageName,
    StageOutcome,
    State,
)
from console import vocabulary
from console.vocabulary import Kind

RECOVERY = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"

NAMED: list[tuple[Kind, type[Enum]]] = [
    (Kind.STATE, State),
    (Kind.OUTCOME, Outcome),
    (Kind.QUEUE, Outcome),
    (Kind.STAGE, StageName),
    (Kind.STAGE_OUTCOME, StageOutcome),
    (Kind.RECOVERY, RecoveryKind),
    (Kind.AUDIT, AuditAction),
    (Kind.EFFECT_STATUS, EffectStatus),
    (Kind.APPROVAL_STATUS, ApprovalStatus),
    (Kind.QA_STATUS, QAStatus),
    (Kind.BATCH_STATUS, BatchStatus),
]


@pytest.mark.parametrize(("kind", "codes"), NAMED, ids=[f"{k}" for k, _ in NAMED])
def test_every_code_has_a_label_and_an_explanation(kind: Kind, codes: type[Enum]) -> None:
    table = vocabulary.VOCABULARY[kind]
    missing = [member.value for member in codes if member.value not in table]
    assert not missing, f"name these {kind} codes in console/vocabulary.py: {missing}"
    for member in codes:
        entry = table[member.value]
        assert entry.label and entry.explanation, member.value
        assert "_" not in entry.label, f"{member.value}: a label is words, not a code"


def test_every_action_a_transition_offers_has_its_words() -> None:
    field = cast(FSMField, Run._meta.get_field("state"))
    actions = {t.custom["action"] for t in field.get_all_transitions(Run) if t.custom.get("action")}
    assert actions == {
        "correct",
        "correct_rejected",
        "resume",
        "retry",
        "retry_effect",
        "reconsider",
        "replay",
        "resolve",
        "abandon",
    }
    assert actions <= set(vocabulary.RECOVERY)


def test_a_code_nobody_named_still_reads_as_words() -> None:
    assert vocabulary.label("outcome", "something_new") == "Something new"
    assert vocabulary.label("rule", "signal.account_compromise") == "Risk signal"
    assert vocabulary.label("state", None) == "—"


@pytest.mark.parametrize(
    ("kind", "heading"), [("state", "State"), ("outcome", "Outcome"), ("recovery", "Action")]
)
def test_the_documented_tables_are_the_vocabulary(kind: str, heading: str) -> None:
    table = vocabulary.markdown_table(kind, heading)

    assert table in RECOVERY.read_text(encoding="utf-8"), (
        f"docs/recovery.md's {kind} table is out of date: paste "
        f"console.vocabulary.markdown_table({kind!r}, {heading!r})"
    )


@pytest.mark.parametrize(
    ("attempts", "due_in", "deadline_in", "run_state", "said"),
    [
        (1, 30, 3600, State.EXECUTING, "Will try again"),
        (5, 30, 3600, State.EXECUTING, "Gave up"),  # its attempts are used up
        (1, 30, -1, State.EXECUTING, "Gave up"),  # its deadline passed
        (1, None, 3600, State.NEEDS_REVIEW, "Gave up"),  # held: no attempt is due
        (1, 30, 3600, State.NEEDS_REVIEW, "On hold"),  # its run waits for a person
    ],
)
def test_a_delivery_will_try_again_only_while_another_attempt_is_due(
    attempts: int, due_in: int | None, deadline_in: int, run_state: str, said: str
) -> None:
    now = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    effect = Effect(
        status=EffectStatus.RETRY_WAIT,
        attempts=attempts,
        attempt_limit=5,
        next_attempt_at=None if due_in is None else now + timedelta(seconds=due_in),
        deadline_at=now + timedelta(seconds=deadline_in),
    )
    term, stopped = vocabulary.effect_status_term(effect, run_state=run_state, now=now)
    assert (term.label, stopped) == (said, said != "Will try again")
