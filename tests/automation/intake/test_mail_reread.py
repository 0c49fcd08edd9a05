"""A folder read again takes in only what is new: each file taken in before, with the same
bytes, is passed over, whether or not it could be read as a message."""

from __future__ import annotations

import hashlib
import mailbox
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.models import AuditEvent
from automation.intake.mailbox import MailBatch, mail_intake, mail_sources
from automation.intake.services import channel_get_or_create
from automation.models import IntakeChannel, IntakeRecord, Outcome, Run
from policy.models import PolicyVersion

MAIL = Path(__file__).resolve().parents[2] / "data" / "mail"
QUOTE = "01-quote-request-northwind.eml"
NOT_MAIL = "34-not-an-email.eml"


def sample(name: str) -> bytes:
    return (MAIL / name).read_bytes()


@pytest.fixture
def email(policy: None) -> IntakeChannel:
    return channel_get_or_create(name="email")


def read(channel: IntakeChannel, *paths: Path) -> MailBatch:
    return mail_intake(channel=channel, sources=mail_sources(list(paths)))


def counts() -> list[int]:
    return [model.objects.count() for model in (Run, IntakeRecord, AuditEvent)]


def test_a_maildir_read_again_takes_in_only_the_new_message(
    email: IntakeChannel, tmp_path: Path
) -> None:
    box = mailbox.Maildir(tmp_path / "inbox")
    box.add(sample(QUOTE))
    box.add(sample(NOT_MAIL))  # cannot be read: an invalid run, and no Message-ID to know it by
    first = read(email, tmp_path / "inbox")
    assert (first.new_runs, first.invalid) == (1, 1)
    box.add(sample("17-suspicious-signins-northwind.eml"))
    before = counts()

    again = read(email, tmp_path / "inbox")

    assert again.summary() == (
        "read 3: 1 new runs, 0 replays, 0 conflicts, 0 invalid, 0 unreadable, 2 taken in before"
    )
    assert counts() == [before[0] + 1, before[1] + 1, before[2] + 1]


def test_a_file_whose_bytes_changed_is_taken_in_again(email: IntakeChannel, tmp_path: Path) -> None:
    message = tmp_path / "quote.eml"
    message.write_bytes(sample(QUOTE))
    read(email, message)
    message.write_bytes(sample(QUOTE).replace(b"Subject: ", b"Subject: Changed: ", 1))

    again = read(email, message)

    assert (again.conflicts, again.taken_before) == (1, 0)  # same Message-ID, other content


def test_the_same_bytes_in_another_file_are_still_a_replay(
    email: IntakeChannel, tmp_path: Path
) -> None:
    (tmp_path / "a.eml").write_bytes(sample(QUOTE))
    (tmp_path / "b.eml").write_bytes(sample(QUOTE))

    batch = read(email, tmp_path)

    assert (batch.new_runs, batch.replays, batch.taken_before) == (1, 1, 0)
    assert [result.code for _, result in batch.results] == ["accepted", Outcome.IDEMPOTENT_REPLAY]


def test_a_message_kept_without_a_run_is_taken_in_on_the_next_read(
    email: IntakeChannel, tmp_path: Path
) -> None:
    (tmp_path / "quote.eml").write_bytes(sample(QUOTE))
    active = PolicyVersion.objects.filter(is_active=True)
    active_ids = list(active.values_list("pk", flat=True))
    active.update(is_active=False)
    failed = read(email, tmp_path)
    assert failed.errors == 1
    assert IntakeRecord.objects.get().admission_error  # kept, with why it has no run
    PolicyVersion.objects.filter(pk__in=active_ids).update(is_active=True)

    again = read(email, tmp_path)

    assert (again.new_runs, again.taken_before) == (1, 0)


def test_every_intake_record_keeps_the_digest_of_its_bytes(email: IntakeChannel) -> None:
    record = IntakeRecord.objects.create(
        channel=email, raw=b"raw bytes", content_type="message/rfc822", source="test"
    )

    record.refresh_from_db()
    assert record.raw_sha256 == hashlib.sha256(b"raw bytes").hexdigest()


BEFORE = [("automation", "0025_batch_preview")]
AFTER = [("automation", "0026_intake_raw_sha256")]


def migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_records_made_before_it_their_digest() -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        apps = migrate(BEFORE)
        channel = apps.get_model("automation", "IntakeChannel").objects.create(
            name="email", workflow_version="workflow-1", prompt_version="prompt-1"
        )
        old = apps.get_model("automation", "IntakeRecord").objects.create(
            channel=channel, raw=b"old bytes", content_type="message/rfc822", source="test"
        )

        apps = migrate(AFTER)

        digest = apps.get_model("automation", "IntakeRecord").objects.get(pk=old.pk).raw_sha256
        assert digest == hashlib.sha256(b"old bytes").hexdigest()
    finally:
        migrate(latest)
