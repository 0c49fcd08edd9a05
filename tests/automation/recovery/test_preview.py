"""Previews of replay, retry and re-decision, and batches that start only from a fresh one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from automation.models import BatchStatus, RecoveryAction, RecoveryBatch, Run, State
from automation.recovery.preview import PreviewRow, Result, preview_runs
from automation.recovery.services import batch_preview, batch_process, batch_start, run_resolve
from console.previews import preview_sentence
from core.errors import ServiceError
from policy.services import DEFAULT_VERSION, REFERENCE_VERSION, policy_version_activate
from tests.automation.recovery.test_recovery import completed, exhausted, invalid, person
from tests.automation.test_admin import awaiting_approval, held_for_its_effect
from tests.conftest import Pipeline


@pytest.fixture
def lead(db: None) -> User:
    return person("lee", "ops-leads")


def one(run: Run, action: str, user: User) -> Any:
    (row,) = preview_runs(run_ids=[run.pk], action=action, user=user)
    return row


def said(row: PreviewRow) -> str:
    """The row as the console says it."""
    return preview_sentence(row.as_dict())


def test_a_replay_of_a_delivered_run_is_deduplicated(pipeline: Pipeline, lead: User) -> None:
    run = completed(pipeline)

    row = one(run, "replay", lead)

    assert row.result == Result.DEDUPLICATED
    assert "already delivered under the same key" in said(row)
    assert "Create a follow-up" in said(row)


def test_a_replay_under_a_stricter_policy_goes_to_a_queue(pipeline: Pipeline, lead: User) -> None:
    """The run completed under policy-1 (no threshold); default-1 asks 0.6 of a support
    reading, and this one gave none: it would now go to a person."""
    run = completed(pipeline)
    policy_version_activate(name=DEFAULT_VERSION)

    row = one(run, "replay", lead)

    assert (row.result, row.queue) == (Result.QUEUED, "low_confidence")
    assert "Unsure reading" in said(row)
    assert [r["change"] for r in row.rules] == ["now stops it"]  # the simulation's words


def test_a_redecision_shows_who_would_approve(pipeline: Pipeline, lead: User) -> None:
    run = awaiting_approval(pipeline)

    row = one(run, "reconsider", lead)

    assert (row.result, row.approvers) == (Result.APPROVAL, "security-approvers")
    assert "would wait for approval by security-approvers" in said(row)


def test_a_held_effect_would_be_sent_again_under_its_key(
    pipeline: Pipeline, lead: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = held_for_its_effect(pipeline, monkeypatch)

    row = one(run, "retry", lead)

    assert row.result == Result.SENT
    assert "under the same key" in said(row)


def test_a_classifier_retry_says_the_reading_decides(pipeline: Pipeline, lead: User) -> None:
    row = one(exhausted(pipeline), "retry", lead)

    assert row.result == Result.READ_AGAIN


def test_an_action_the_run_does_not_allow_is_previewed_as_not_possible(
    pipeline: Pipeline, lead: User
) -> None:
    row = one(exhausted(pipeline), "replay", lead)

    assert row.result == Result.NOT_POSSIBLE
    assert "Needs a person" in said(row)


def test_a_preview_changes_nothing(pipeline: Pipeline, lead: User) -> None:
    run = completed(pipeline)
    before = Run.objects.values().get(pk=run.pk)

    preview_runs(run_ids=[run.pk], action="replay", user=lead)

    assert Run.objects.values().get(pk=run.pk) == before
    assert Run.objects.count() == 1


def test_the_run_preview_page_shows_what_would_happen_and_starts_it(
    pipeline: Pipeline, lead: User
) -> None:
    run = completed(pipeline)
    client = Client()
    client.force_login(lead)

    page = client.get(reverse("runs:preview", args=[run.pk, "replay"])).content.decode()

    assert "Replay: what would happen" in page
    assert "Already delivered" in page
    assert reverse("runs:recover", args=[run.pk, "replay"]) in page


# --- batches ----------------------------------------------------------------------------------


def held_batch(pipeline: Pipeline, lead: User, count: int = 2) -> RecoveryBatch:
    for n in range(count):
        exhausted(pipeline, event_id=f"evt-held-{n}")
    now = timezone.now()
    return batch_preview(
        action="retry",
        queue="retry_exhausted",
        since=now - timedelta(hours=1),
        until=now + timedelta(minutes=1),
        user=lead,
        reason="classifier back",
    )


def test_a_batch_is_a_preview_until_someone_starts_it(pipeline: Pipeline, lead: User) -> None:
    batch = held_batch(pipeline, lead)

    assert batch.status == BatchStatus.PREVIEW
    assert [row["result"] for row in batch.preview] == [Result.READ_AGAIN] * 2
    assert batch_process(batch_id=batch.pk).done == 0  # a preview is not worked
    assert not RecoveryAction.objects.exists()

    with pipeline.capture():
        batch_start(batch_id=batch.pk, user=lead)
    pipeline.drain()

    batch.refresh_from_db()
    assert (batch.status, batch.done, batch.succeeded) == (BatchStatus.FINISHED, 2, 2)
    with pytest.raises(ServiceError, match="already been started"):
        batch_start(batch_id=batch.pk, user=lead)


def test_a_batch_does_not_start_from_an_old_preview(pipeline: Pipeline, lead: User) -> None:
    batch = held_batch(pipeline, lead)
    RecoveryBatch.objects.filter(pk=batch.pk).update(
        previewed_at=timezone.now() - timedelta(hours=1)
    )

    with pytest.raises(ServiceError, match="out of date: it is 60 minutes old"):
        batch_start(batch_id=batch.pk, user=lead)
    assert RecoveryBatch.objects.get(pk=batch.pk).status == BatchStatus.PREVIEW


def test_a_batch_does_not_start_after_the_policy_changed(pipeline: Pipeline, lead: User) -> None:
    batch = held_batch(pipeline, lead)
    policy_version_activate(name=DEFAULT_VERSION)

    with pytest.raises(ServiceError, match=f"the active policy is now {DEFAULT_VERSION}"):
        batch_start(batch_id=batch.pk, user=lead)
    policy_version_activate(name=REFERENCE_VERSION)


def test_a_batch_does_not_start_when_a_run_moved_since(pipeline: Pipeline, lead: User) -> None:
    batch = held_batch(pipeline, lead)
    run_resolve(run_id=batch.run_ids[0], user=lead, reason="done", evidence="phoned", done=True)

    with pytest.raises(ServiceError, match="1 run would now come to something else"):
        batch_start(batch_id=batch.pk, user=lead)
    assert Run.objects.get(pk=batch.run_ids[1]).state == State.NEEDS_REVIEW


def test_the_console_starts_a_batch_only_from_its_preview(pipeline: Pipeline, lead: User) -> None:
    for n in range(2):
        exhausted(pipeline, event_id=f"evt-held-{n}")
    client = Client()
    client.force_login(lead)
    now = timezone.now()
    form = {
        "action": "retry",
        "since": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"),
        "until": (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"),
        "reason": "classifier back",
    }

    response = client.post(reverse("queues:batch_new", args=["retry_exhausted"]), form)
    batch = RecoveryBatch.objects.get()
    page = client.get(response["Location"]).content.decode()

    assert batch.status == BatchStatus.PREVIEW
    assert "What would happen" in page and "Read again first" in page
    assert page.count('data-result="read_again"') == 2
    with pipeline.capture():
        client.post(reverse("queues:batch_start", args=[batch.pk]))
    pipeline.drain()
    assert RecoveryBatch.objects.get().status == BatchStatus.FINISHED
    assert "Start: retry 2 runs" in page


def test_a_batch_whose_runs_cannot_be_retried_offers_no_start_and_says_why(
    pipeline: Pipeline, lead: User
) -> None:
    # A retry is for a held delivery or a classifier that ran out: a reading a person must
    # correct is not retried, and the preview says so, run by run, in words.
    for n in range(3):
        invalid(pipeline, event_id=f"evt-bad-{n}")
    client = Client()
    client.force_login(lead)
    now = timezone.now()
    form = {
        "action": "retry",
        "since": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"),
        "until": (now + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"),
        "reason": "classifier back",
    }

    response = client.post(reverse("queues:batch_new", args=["classification_invalid"]), form)
    batch = RecoveryBatch.objects.get()
    page = client.get(response["Location"]).content.decode()

    assert [row["result"] for row in batch.preview] == [Result.NOT_POSSIBLE] * 3
    assert 'data-testid="batch-start"' not in page and "Start: retry" not in page
    assert "None of these runs can be retried now: nothing to start." in page
    assert (
        page.count(
            "Not possible: the run is “Needs a person” for “Unusable reading”; its page offers: "
            "Correct the reading, Resolve by hand, Abandon. It is left as it is."
        )
        == 3
    )
    # A start sent anyway is refused in words, and nothing is done to the runs.
    started = client.post(reverse("queues:batch_start", args=[batch.pk]), follow=True)
    text = started.content.decode()
    assert "Not started: None of its runs can be retried now; nothing was started." in text
    assert "state_conflict" not in text
    assert RecoveryBatch.objects.get().status == BatchStatus.PREVIEW
    assert not RecoveryAction.objects.exists()


def test_a_started_batch_works_only_the_runs_its_preview_said_it_can(
    pipeline: Pipeline, lead: User
) -> None:
    batch = held_batch(pipeline, lead)
    doable = list(batch.run_ids)
    stuck = invalid(pipeline, event_id="evt-bad-in-batch")
    # A batch prepared over runs of more than one kind (as one chosen by hand would be).
    RecoveryBatch.objects.filter(pk=batch.pk).update(run_ids=[*doable, stuck.pk])
    rows = preview_runs(run_ids=[*doable, stuck.pk], action="retry", user=lead)
    RecoveryBatch.objects.filter(pk=batch.pk).update(preview=[r.as_dict() for r in rows])

    with pipeline.capture():
        batch_start(batch_id=batch.pk, user=lead)
    pipeline.drain()

    batch.refresh_from_db()
    assert batch.run_ids == doable
    assert (batch.status, batch.done, batch.succeeded, batch.failures) == (
        BatchStatus.FINISHED,
        2,
        2,
        [],
    )
    assert not RecoveryAction.objects.filter(run=stuck).exists()


def test_a_replay_of_a_delivery_that_gave_up_does_not_say_it_will_try_again(
    pipeline: Pipeline, lead: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = held_for_its_effect(pipeline, monkeypatch)
    run_resolve(run_id=run.pk, user=lead, reason="dropped", evidence="told by phone", done=False)

    row = one(run, "replay", lead)

    assert (row.result, row.status) == (Result.SENT, "retry_wait")
    assert "Will try again" not in said(row)
    assert "(last time: Gave up)" in said(row)
