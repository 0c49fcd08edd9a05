"""core.sql: rows of several tables in one statement, and an insert that a unique key may
turn into nothing, each as the ORM would have written them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import ProgrammingError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.models import (
    FollowUp,
    QAReview,
    QAStatus,
    Run,
    StageName,
    StageOutcome,
    StageRecord,
    State,
)
from core.sql import insert_new, insert_rows, insert_together, loaded, new_rows, read_first
from tests.conftest import Pipeline, make_event

pytestmark = pytest.mark.django_db


def a_run(pipeline: Pipeline) -> Run:
    return pipeline.run(pipeline.submit(make_event(event_id="evt-sql"), drain=False))


def test_rows_of_several_tables_are_one_statement_with_their_defaults(pipeline: Pipeline) -> None:
    run = a_run(pipeline)
    before = StageRecord.objects.filter(run=run).count()
    now = timezone.now()
    stages = [
        StageRecord(
            run=run,
            stage=name,
            outcome=StageOutcome.ACCEPTED,
            started_at=now,
            finished_at=now,
            duration_ms=0,
        )
        for name in (StageName.VALIDATE, StageName.NORMALIZE)
    ]
    follow_up = FollowUp(idempotency_key="k-1", run=run, payload={"a": 1}, route="r", subject="s")

    with CaptureQueriesContext(connection) as queries:
        insert_together([stages, [], [follow_up]])

    assert len(queries.captured_queries) == 1
    written = list(StageRecord.objects.filter(run=run).order_by("pk")[before:])
    assert [row.stage for row in written] == [StageName.VALIDATE, StageName.NORMALIZE]
    stored = FollowUp.objects.get(idempotency_key="k-1")
    assert stored.payload == {"a": 1}  # JSON prepared as the field prepares it
    assert stored.created_at is not None  # auto_now_add filled in


def test_an_insert_that_meets_its_unique_key_writes_nothing(pipeline: Pipeline) -> None:
    run = a_run(pipeline)
    first = FollowUp(idempotency_key="k-2", run=run, payload={}, route="r", subject="first")
    again = FollowUp(idempotency_key="k-2", run=run, payload={}, route="r", subject="again")

    assert insert_new(first, unique="idempotency_key") is True
    assert first.pk is not None and not first._state.adding
    assert insert_new(again, unique="idempotency_key") is False
    assert again.pk is None
    assert FollowUp.objects.get(idempotency_key="k-2").subject == "first"
    first.subject = "changed"
    first.save()  # an UPDATE of the inserted row, not a second insert
    assert FollowUp.objects.filter(idempotency_key="k-2").count() == 1


def test_rows_inserted_together_read_back_as_the_orm_writes_them(pipeline: Pipeline) -> None:
    """Values of plain types go to the driver as they are; the rest as their field prepares
    them: either way a row reads back as the one `save()` writes."""
    original = a_run(pipeline)
    values = {
        "channel": original.channel,
        "intake": original.intake,
        "event_id": "evt-together ünïcode 'quoted'",
        "identity_scope": "sql-test",
        "normalized": {"event_id": "x", "nested": {"list": [1, 2.5, None, True]}, "s": "é"},
        "enrichment": {},
        "rules": [{"rule_id": "r", "passed": False}],
        "confidence": 0.75,
        "classify_attempts": 2,
        "claims_identity": False,
        "next_attempt_at": timezone.now(),
        "failure_detail": "",
    }
    saved = Run(**values)
    saved.save()
    together = Run(**values)
    together.pk = Run.objects.order_by("-pk").values_list("pk", flat=True)[0] + 1000

    insert_together([[together]])

    fields = [f.attname for f in Run._meta.concrete_fields]
    skip = {"id", "created_at", "updated_at"}
    read = Run.objects.values(*fields).get(pk=together.pk)
    assert {k: v for k, v in read.items() if k not in skip} == {
        k: v for k, v in Run.objects.values(*fields).get(pk=saved.pk).items() if k not in skip
    }
    assert read["id"] == together.pk  # a row that carries its primary key is written with it


def test_rows_made_from_fields_read_back_as_the_orm_writes_them(pipeline: Pipeline) -> None:
    """new_rows fills what a field dict leaves out as `Model(**fields)` does: constant
    defaults (written in the statement), auto_now stamps, the rest as the field prepares it;
    `loaded` is the instance the database would give back."""
    original = a_run(pipeline)
    fields = {
        "channel": original.channel,  # a related instance, by its field's name
        "intake_id": original.intake_id,  # or its key, by the attname
        "event_id": "evt-fields 'quoted' ünïcode",
        "identity_scope": "sql-fields",
        "normalized": {"event_id": "x", "nested": {"list": [1, 2.5, None, True]}},
        "confidence": 0.5,
        "replay_of": None,
        "dispatched_at": timezone.now(),
    }
    saved = Run(**fields)
    saved.save()
    pk = Run.objects.order_by("-pk").values_list("pk", flat=True)[0] + 1000
    now = timezone.now()
    rows = new_rows([(Run, {"id": pk, **fields}), (StageRecord, stage_fields(saved))], now)

    with CaptureQueriesContext(connection) as queries:
        insert_rows(rows)

    assert len(queries.captured_queries) == 1
    columns = [f.attname for f in Run._meta.concrete_fields]
    skip = {"id", "created_at", "updated_at"}
    read = Run.objects.values(*columns).get(pk=pk)
    expected = Run.objects.values(*columns).get(pk=saved.pk)
    assert {k: v for k, v in read.items() if k not in skip} == {
        k: v for k, v in expected.items() if k not in skip
    }
    assert read["state"] == State.RECEIVED and read["enrichment"] == {} and read["rules"] == []
    assert read["created_at"] == read["updated_at"] == now  # stamped with the rows' time
    instance = loaded(Run, rows[0])
    assert not instance._state.adding and instance.pk == pk
    assert {c: getattr(instance, c) for c in columns} == read
    assert StageRecord.objects.filter(run=saved, stage=StageName.VALIDATE).count() == 1


def stage_fields(run: Run) -> dict[str, Any]:
    now = timezone.now()
    return {
        "run": run,
        "stage": StageName.VALIDATE,
        "started_at": now,
        "finished_at": now,
        "duration_ms": 0,
        "outcome": StageOutcome.ACCEPTED,
    }


def test_a_callable_default_is_called_for_each_row_and_unknown_fields_are_refused(
    pipeline: Pipeline,
) -> None:
    runs = [a_run(pipeline)]
    runs.append(pipeline.run(pipeline.submit(make_event(event_id="evt-sql-2"), drain=False)))
    review = {"route": "r", "group": "g", "policy_version": "p", "classifier_version": "c"}
    rows = new_rows(
        [(QAReview, {"run": run, **review, "reading": {"n": n}}) for n, run in enumerate(runs)],
        timezone.now(),
    )
    insert_rows(rows)

    stored = list(QAReview.objects.order_by("pk"))
    assert [r.reading for r in stored] == [{"n": 0}, {"n": 1}]
    assert {r.status for r in stored} == {QAStatus.OPEN}
    assert stored[0].created_at <= stored[1].created_at  # timezone.now, called per row
    assert [r.created_at for r in stored] == [row.values["created_at"] for row in rows]
    with pytest.raises(FieldDoesNotExist):
        new_rows([(QAReview, {"no_such_field": 1})], timezone.now())
    with pytest.raises(TypeError):
        loaded(Run, rows[0])  # a row of another model


@pytest.mark.django_db(transaction=True)
def test_a_requests_first_read_is_its_health_check_and_replaces_a_broken_connection() -> None:
    with connection.cursor() as cursor:  # a persistent connection, then a request ends
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"]
    ) as other:  # the server drops it while idle (a restart, a failover)
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    connection.close_if_unusable_or_obsolete()  # what the next request's start does

    row = read_first("SELECT pg_backend_pid()", [])

    assert row is not None and row[0] != pid  # read again on a new connection
    assert connection.health_check_done  # no SELECT 1 before the request's next statement
    with pytest.raises(ProgrammingError):  # any other error is the caller's, not retried
        read_first("SELECT no_such_column FROM automation_run", [])
