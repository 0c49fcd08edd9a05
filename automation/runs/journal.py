"""A run's history as it is written: stage timings, checkpoints, audit rows, transitions.

Inside `journal(run)` (the pipeline carrying a run) the rows of that run are kept and written
with one INSERT per table when the block ends; anywhere else each row is written at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MethodType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.contrib.auth.models import User
from django.db.models import Model
from django.utils import timezone
from django_fsm import FSMField

from audit.models import AuditAction, AuditEvent
from audit.services import SYSTEM, audit_record
from automation.runs.models import Checkpoint, Run, StageName, StageOutcome, StageRecord
from automation.runs.runlog import log_run

if TYPE_CHECKING:  # intake sits above the run's record; only the type is needed
    from automation.intake.models import IntakeRecord


@dataclass
class Stage:
    """Times one stage attempt; written as a StageRecord in the same transaction."""

    name: StageName
    attempt: int = 1
    started_at: datetime = field(default_factory=timezone.now)
    # Known already (a call timed elsewhere, such as a remote delivery); else timed here.
    duration_ms: int | None = None
    _clock: float = field(default_factory=time.monotonic)

    def record(self, run: Run, outcome: StageOutcome, error_class: str = "") -> StageRecord:
        return _write(run, StageRecord(run=run, **self.fields(outcome, error_class)))

    def fields(self, outcome: StageOutcome, error_class: str = "") -> dict[str, Any]:
        """The StageRecord of this attempt ending now, but its run."""
        elapsed_ms = (
            self.duration_ms
            if self.duration_ms is not None
            else int((time.monotonic() - self._clock) * 1000)
        )
        return {
            "stage": self.name,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "finished_at": self.started_at + timedelta(milliseconds=elapsed_ms),
            "duration_ms": elapsed_ms,
            "outcome": outcome,
            "error_class": error_class,
        }


@dataclass
class _Journal:
    """The history rows of one run's transaction, written together when it is done."""

    run_id: int
    rows: list[Model] = field(default_factory=list)
    last_sequence: int | None = None

    def flush(self) -> None:
        tables: dict[type[Model], list[Model]] = {}
        for row in self.rows:  # by table, each table in the order its rows were made
            tables.setdefault(type(row), []).append(row)
        for model, rows in tables.items():
            model._default_manager.bulk_create(rows)
        self.rows.clear()


_journal: contextvars.ContextVar[_Journal | None] = contextvars.ContextVar(
    "gatehouse_run_journal", default=None
)


@contextlib.contextmanager
def journal(run: Run, *, last_sequence: int | None = None) -> Iterator[_Journal]:
    """Write the run's stage records, checkpoints and audit rows made in the block with one
    INSERT per table when it ends, in the order they were made. Only inside the run's
    transaction, and only for the pipeline's own steps: nothing in the block may read back
    the rows it made (checkpoint numbers are counted here)."""
    current = _Journal(run.pk, last_sequence=last_sequence)
    token = _journal.set(current)
    try:
        yield current
    finally:
        _journal.reset(token)
    current.flush()  # not reached when the block raised: its transaction rolls back


R = TypeVar("R", bound=Model)


def write_row(run: Run, row: R) -> R:
    """Write a new history row of the run (a classifier or delivery attempt): with the run's
    journal when one is open, at once otherwise. Its primary key is then not read back."""
    return _write(run, row)


def _write(run: Run | None, row: R) -> R:
    current = _journal.get()
    if current is not None and run is not None and current.run_id == run.pk:
        current.rows.append(row)
        return row
    row.save()
    return row


def versions_of(run: Run) -> dict[str, str]:
    return {
        "workflow": run.workflow_version,
        "classifier": run.classifier_version,
        "prompt": run.prompt_version,
        "policy": run.policy_version,
    }


def add_checkpoint(run: Run, data: dict[str, Any], source: str = "pipeline") -> Checkpoint:
    current = _journal.get()
    counted = current is not None and current.run_id == run.pk
    if counted and current is not None and current.last_sequence is not None:
        last: int | None = current.last_sequence
    else:
        last = run.checkpoints.order_by("-sequence").values_list("sequence", flat=True).first()
    sequence = (last or 0) + 1
    if counted and current is not None:
        current.last_sequence = sequence
    checkpoint = Checkpoint(
        run=run,
        sequence=sequence,
        state=run.state,
        versions=versions_of(run),
        data=data,
        source=source,
    )
    return _write(run, checkpoint)


def record_audit(
    run: Run | None,
    action: AuditAction,
    *,
    actor: User | None = None,
    actor_label: str = SYSTEM,
    from_state: str = "",
    intake: IntakeRecord | None = None,
    **data: Any,
) -> AuditEvent:
    """Write one audit row, about a run or (run=None) about intake or configuration: the one
    way automation writes to the trail. Within the run's journal the row waits for the
    journal's INSERT; otherwise it is written now, by audit.services.audit_record."""
    current = _journal.get()
    if current is None or run is None or current.run_id != run.pk:
        return audit_record(
            action=action,
            actor=actor,
            actor_label=actor_label,
            run_id=run.pk if run is not None else None,
            intake_id=intake.pk if intake is not None else None,
            from_state=from_state,
            to_state=run.state if run is not None else "",
            **data,
        )
    fields = audit_fields(
        run, action, actor=actor, actor_label=actor_label, from_state=from_state, intake=intake
    )
    return _write(run, AuditEvent(**fields, data=data))


def audit_fields(
    run: Run,
    action: AuditAction,
    *,
    actor: User | None = None,
    actor_label: str = SYSTEM,
    from_state: str = "",
    intake: IntakeRecord | None = None,
) -> dict[str, Any]:
    """The AuditEvent that record_audit writes in a run's journal, but its data."""
    return {
        "run_id": run.pk,
        "intake_id": intake.pk if intake is not None else None,
        "actor": actor,
        "actor_label": actor.get_username() if actor is not None else actor_label,
        "action": action,
        "from_state": from_state,
        "to_state": run.state,
    }


# Each transition of a run and the audit action that records it ("run." and its name). Built
# when this module is loaded: a transition added without its audit action fails right here.
TRANSITION_ACTIONS: dict[str, AuditAction] = {
    transition.name: AuditAction(f"run.{transition.name}")
    for transition in cast(FSMField, Run._meta.get_field("state")).get_all_transitions(Run)
}


def record_transition(
    run: Run,
    transition: MethodType,
    *,
    stage: Stage | None = None,
    stage_outcome: StageOutcome = StageOutcome.OK,
    checkpoint: dict[str, Any] | None = None,
    actor: User | None = None,
    note: dict[str, Any] | None = None,
    save: bool = True,
    **kwargs: Any,
) -> None:
    """Apply one transition, a bound method of the run (`run.hold`), and write everything that
    commits with it. Its audit action and log line are named after the method.

    `kwargs` go to the transition method; `note` only to the audit row (a reason, say).
    With save=False the caller saves the run once after several transitions, in the same
    transaction (the pipeline carrying a run through its steps).
    """
    if transition.__self__ is not run:
        raise ValueError(f"{transition.__name__} is not a transition of run {run.pk}")
    name = transition.__name__
    action = TRANSITION_ACTIONS[name]
    before = run.state
    transition(**kwargs)
    if save:
        run.save()
    if stage is not None:
        stage.record(run, stage_outcome)
    if checkpoint is not None:
        add_checkpoint(run, checkpoint)
    record_audit(run, action, actor=actor, from_state=before, outcome=run.outcome, **(note or {}))
    log_run(
        run,
        f"run {run.pk} {name}: {before} -> {run.state}",
        transition=name,
        from_state=before,
        to_state=run.state,
        actor=actor.get_username() if actor is not None else SYSTEM,
    )
