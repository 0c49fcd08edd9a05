"""core.rows: an insert that a unique key may turn into nothing, in the caller's transaction."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from automation.models import Run, Task
from core.rows import insert_new
from tests.conftest import Pipeline, make_event

pytestmark = pytest.mark.django_db


def a_run(pipeline: Pipeline) -> Run:
    return pipeline.run(pipeline.submit(make_event(event_id="evt-rows"), drain=False))


def test_an_insert_that_meets_its_unique_key_writes_nothing(pipeline: Pipeline) -> None:
    run = a_run(pipeline)
    first = Task(idempotency_key="k-2", run=run, payload={}, effect="e", route="r", subject="first")
    again = Task(idempotency_key="k-2", run=run, payload={}, effect="e", route="r", subject="again")

    with transaction.atomic():
        assert insert_new(first, unique="idempotency_key") is True
        assert first.pk is not None and not first._state.adding
        assert insert_new(again, unique="idempotency_key") is False
        # The refused insert had a savepoint of its own: the transaction goes on.
        assert Task.objects.get(idempotency_key="k-2").subject == "first"
    assert again.pk is None
    first.subject = "changed"
    first.save()  # an UPDATE of the inserted row, not a second insert
    assert Task.objects.filter(idempotency_key="k-2").count() == 1


def test_another_constraints_refusal_is_not_taken_for_a_duplicate(pipeline: Pipeline) -> None:
    run = a_run(pipeline)
    unnamed = Task(idempotency_key="k-3", run=run, payload={}, effect="e", route=None)  # NOT NULL
    with pytest.raises(IntegrityError):
        insert_new(unnamed, unique="idempotency_key")
    assert not Task.objects.filter(idempotency_key="k-3").exists()
