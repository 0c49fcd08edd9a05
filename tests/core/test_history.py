"""History rows (core.history.AppendOnly): written once, then neither edited nor deleted, by
a row's save() or delete() or by a queryset's update() or delete()."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import models

from approvals.models import ApprovalDecision
from audit.models import AuditEvent
from automation.classifiers.models import ClassificationAttempt
from automation.effects.models import TaskComment
from automation.intake.models import IntakeRecord
from automation.recovery.models import RecoveryAction
from automation.runs.models import Checkpoint, Run, RunComment, StageRecord
from core.history import AppendOnly, AppendOnlyError, AppendOnlyQuerySet
from tests.conftest import Pipeline, decision_for, make_event

HISTORY = [
    IntakeRecord,
    AuditEvent,
    ApprovalDecision,
    Checkpoint,
    StageRecord,
    RunComment,
    TaskComment,
    ClassificationAttempt,
    RecoveryAction,
]
# Rows one run through the pipeline writes, with a text field each may be edited on.
WRITTEN_BY_A_RUN: list[tuple[type[models.Model], str]] = [
    (AuditEvent, "action"),
    (Checkpoint, "source"),
    (StageRecord, "outcome"),
    (ClassificationAttempt, "classifier"),
]


@pytest.mark.parametrize("model", HISTORY, ids=lambda model: model.__name__)
def test_each_history_model_is_append_only(model: type[models.Model]) -> None:
    assert issubclass(model, AppendOnly)
    assert isinstance(model._default_manager.all(), AppendOnlyQuerySet)


@pytest.fixture
def run(pipeline: Pipeline) -> Run:
    event = make_event(event_id="history-1")
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def stored(model: type[models.Model], pk: Any) -> dict[str, Any]:
    return model._default_manager.values().get(pk=pk)


def first_of(model: type[models.Model], run: Run) -> models.Model:
    rows = model._default_manager.filter(run=run).order_by("pk")
    assert rows.exists(), f"the run wrote no {model.__name__}"
    return rows.first()  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("model", "field"), WRITTEN_BY_A_RUN, ids=lambda v: getattr(v, "__name__", v)
)
def test_saving_an_existing_row_is_refused(run: Run, model: type[models.Model], field: str) -> None:
    row = first_of(model, run)
    before = stored(model, row.pk)
    setattr(row, field, "edited")

    with pytest.raises(AppendOnlyError, match="append-only: update refused"):
        row.save()
    with pytest.raises(AppendOnlyError, match="append-only: update refused"):
        row.save(update_fields=[field])

    assert stored(model, row.pk) == before


@pytest.mark.parametrize(
    ("model", "field"), WRITTEN_BY_A_RUN, ids=lambda v: getattr(v, "__name__", v)
)
def test_deleting_a_row_is_refused(run: Run, model: type[models.Model], field: str) -> None:
    row = first_of(model, run)
    before = stored(model, row.pk)

    with pytest.raises(AppendOnlyError, match="append-only: delete refused"):
        row.delete()

    assert stored(model, row.pk) == before


@pytest.mark.parametrize(
    ("model", "field"), WRITTEN_BY_A_RUN, ids=lambda v: getattr(v, "__name__", v)
)
def test_queryset_edits_are_refused(run: Run, model: type[models.Model], field: str) -> None:
    rows = model._default_manager.filter(run=run)
    before = list(rows.values().order_by("pk"))

    with pytest.raises(AppendOnlyError, match="append-only: update refused"):
        rows.update(**{field: "edited"})
    with pytest.raises(AppendOnlyError, match="append-only: update refused"):
        model._default_manager.bulk_update(list(rows), [field])
    with pytest.raises(AppendOnlyError, match="append-only: delete refused"):
        rows.delete()
    with pytest.raises(AppendOnlyError, match="append-only: delete refused"):
        run.stages.all().delete()

    assert list(rows.values().order_by("pk")) == before


def test_new_rows_are_still_written(run: Run) -> None:
    before = Checkpoint.objects.filter(run=run).count()
    last = Checkpoint.objects.filter(run=run).order_by("-sequence").first()
    assert last is not None

    Checkpoint.objects.create(
        run=run, sequence=last.sequence + 1, state=run.state, versions={}, data={}
    )

    assert Checkpoint.objects.filter(run=run).count() == before + 1
