"""config.sql: rows of several tables in one statement, and an insert that a unique key may
turn into nothing, each as the ORM would have written them."""

from __future__ import annotations

import psycopg
import pytest
from django.db import ProgrammingError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from automation.models import FollowUp, Run, StageName, StageOutcome, StageRecord
from config.sql import insert_new, insert_together, read_first
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


@pytest.mark.postgres
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
