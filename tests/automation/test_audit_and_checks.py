"""Append-only records, and the startup check that refuses an unsafe worker configuration."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from automation.checks import check_q_cluster
from automation.models import AuditEvent, IntakeChannel, IntakeRecord


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


def test_database_refuses_queryset_edits_of_audit_rows(audit: AuditEvent) -> None:
    before = stored(audit)

    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=audit.pk).update(action="edited")
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.filter(pk=audit.pk).delete()

    assert stored(audit) == before


def test_database_still_accepts_new_audit_rows(audit: AuditEvent) -> None:
    AuditEvent.objects.create(intake=audit.intake, action="intake.idempotency_conflict")

    assert AuditEvent.objects.count() == 2


# --- intake records ------------------------------------------------------------------------


def test_saving_an_existing_intake_record_is_refused(intake: IntakeRecord) -> None:
    intake.raw = b"rewritten"

    with pytest.raises(ValueError, match="never modified"):
        intake.save()

    assert bytes(IntakeRecord.objects.get(pk=intake.pk).raw) == b'{"event_id": "evt-1"}'


# --- worker configuration check ------------------------------------------------------------

SAFE = {"timeout": 60, "retry": 120, "max_attempts": 3, "ack_failures": True, "orm": "default"}


def error_ids(**conf: Any) -> list[str]:
    with override_settings(Q_CLUSTER={**SAFE, **conf}):
        return [error.id for error in check_q_cluster()]


def test_project_worker_settings_pass_the_check() -> None:
    assert check_q_cluster() == []
    assert settings.Q_CLUSTER["retry"] > settings.Q_CLUSTER["timeout"]


def test_safe_worker_settings_pass_the_check() -> None:
    assert error_ids() == []


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        pytest.param({"retry": 60}, ["gatehouse.E001"], id="retry-equals-timeout"),
        pytest.param({"retry": 30}, ["gatehouse.E001"], id="retry-below-timeout"),
        pytest.param({"timeout": None}, ["gatehouse.E001"], id="no-timeout"),
        pytest.param({"max_attempts": 0}, ["gatehouse.E002"], id="unlimited-attempts"),
        pytest.param({"ack_failures": False}, ["gatehouse.E003"], id="failures-not-acked"),
    ],
)
def test_unsafe_worker_settings_are_refused(conf: dict[str, Any], expected: list[str]) -> None:
    assert error_ids(**conf) == expected


def test_missing_keys_are_refused() -> None:
    with override_settings(Q_CLUSTER={"orm": "default"}):
        ids = [error.id for error in check_q_cluster()]

    assert ids == ["gatehouse.E001", "gatehouse.E002", "gatehouse.E003"]


def test_negative_max_attempts_is_refused_as_unlimited() -> None:
    assert error_ids(max_attempts=-1) == ["gatehouse.E002"]
