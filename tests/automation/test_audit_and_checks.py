"""Append-only records: audit events and raw intake records are never changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from automation.models import AuditEvent, IntakeChannel, IntakeRecord
from core.history import AppendOnlyError


@pytest.fixture
def intake(db: None) -> IntakeRecord:
    channel = IntakeChannel.objects.create(
        name="audit", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    return IntakeRecord.objects.create(
        channel=channel, raw=b'{"event_id": "evt-1"}', content_type="application/json", source="t"
    )


@pytest.fixture
def audit(intake: IntakeRecord) -> AuditEvent:
    return AuditEvent.objects.create(
        intake=intake, action="intake.idempotent_replay", data={"existing_run": 1}
    )


def stored(event: AuditEvent) -> dict[str, Any]:
    return AuditEvent.objects.values().get(pk=event.pk)


# --- audit events --------------------------------------------------------------------------


def test_saving_an_existing_audit_event_is_refused(audit: AuditEvent) -> None:
    before = stored(audit)
    audit.action = "intake.accepted"

    with pytest.raises(ValueError, match="append-only"):
        audit.save()

    assert stored(audit) == before


def test_deleting_an_audit_event_is_refused(audit: AuditEvent) -> None:
    with pytest.raises(ValueError, match="append-only"):
        audit.delete()

    assert AuditEvent.objects.filter(pk=audit.pk).exists()


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("UPDATE audit_auditevent SET action = 'edited' WHERE id = %s", id="update"),
        pytest.param("DELETE FROM audit_auditevent WHERE id = %s", id="delete"),
    ],
)
def test_database_refuses_raw_edits_of_audit_rows(audit: AuditEvent, sql: str) -> None:
    before = stored(audit)

    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [audit.pk])

    assert stored(audit) == before


def test_queryset_edits_of_audit_rows_are_refused(audit: AuditEvent) -> None:
    before = stored(audit)

    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(pk=audit.pk).update(action="edited")
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(pk=audit.pk).delete()

    assert stored(audit) == before


def test_database_still_accepts_new_audit_rows(audit: AuditEvent) -> None:
    AuditEvent.objects.create(intake=audit.intake, action="intake.idempotency_conflict")

    assert AuditEvent.objects.count() == 2


# --- intake records ------------------------------------------------------------------------


def test_saving_an_existing_intake_record_is_refused(intake: IntakeRecord) -> None:
    intake.raw = b"rewritten"

    with pytest.raises(ValueError, match="append-only: update refused"):
        intake.save()

    assert bytes(IntakeRecord.objects.get(pk=intake.pk).raw) == b'{"event_id": "evt-1"}'
