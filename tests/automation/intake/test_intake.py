"""intake_submit: raw bytes first, then the contract, then the event identity."""

from __future__ import annotations

import json
from typing import Any

import pytest

from automation.intake.services import IntakeResult, intake_submit
from automation.models import (
    AuditEvent,
    Checkpoint,
    Effect,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    StageRecord,
    State,
    Task,
)
from automation.runs.sending import ADVANCE_RUN_TASK
from automation.schemas import fingerprint
from tests.conftest import Pipeline, decision_for, make_event

ADVANCE = ADVANCE_RUN_TASK


def submit_raw(pipeline: Pipeline, raw: bytes) -> IntakeResult:
    """Submit exact bytes to the pipeline's channel; follow-up messages join its queue."""
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel, raw=raw, content_type="application/json", source="test"
        )
    return result


def without(key: str) -> dict[str, Any]:
    event = make_event()
    del event[key]
    return event


def dumps(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


# (case id, raw bytes, field named in run.failure_field)
INVALID_EVENTS = [
    ("missing-key", dumps(without("account_tier")), "account_tier"),
    ("extra-key", dumps({**make_event(), "priority": "high"}), "priority"),
    ("blank-subject", dumps(make_event(subject="   ")), "subject"),
    ("blank-body", dumps(make_event(body="   ")), "body"),
    ("source-outside-set", dumps(make_event(source="fax")), "source"),
    ("account-tier-outside-set", dumps(make_event(account_tier="gold")), "account_tier"),
    ("request-type-outside-set", dumps(make_event(request_type="legal")), "request_type"),
    ("non-string-event-id", dumps(make_event(event_id=100)), "event_id"),
    ("non-object-json", b'["evt-100", "support"]', "body"),
    ("malformed-json", b'{"event_id": "evt-100", "source": ', "body"),
    ("not-utf8", b'{"event_id": "evt-100", "subject": "\xff\xfe"}', "body"),
]


def test_valid_event_is_stored_byte_for_byte_and_creates_a_run(pipeline: Pipeline) -> None:
    # Odd spacing, key order and a non-ASCII escape: the record keeps exactly these bytes.
    raw = b'{ "event_id":"evt-100",\n  "source":"web_form","request_type":"support",' + (
        b'"subject":"Acc\\u00e8s  question","body":"Please\\tcreate a follow-up.",'
        b'"account_tier":"standard","requested_action":"create_follow_up" }\n'
    )

    result = submit_raw(pipeline, raw)

    assert result.code == "accepted"
    intake = IntakeRecord.objects.get()
    assert bytes(intake.raw) == raw
    assert intake.content_type == "application/json"
    assert intake.channel == pipeline.channel
    run = pipeline.run(result)
    assert run.intake == intake
    assert intake.received_at <= run.created_at
    assert run.state == State.RECEIVED
    assert run.claims_identity is True
    assert run.normalized is not None
    assert run.normalized["subject"] == "Accès question"
    assert run.normalized["body"] == "Please create a follow-up."
    assert run.fingerprint == fingerprint(run.normalized)
    assert [(m.func, m.args) for m in pipeline.queue] == [(ADVANCE, (run.pk,))]


def test_valid_event_runs_to_completion(pipeline: Pipeline) -> None:
    event = make_event()

    result = pipeline.submit(event, [decision_for(event)])

    assert pipeline.run(result).outcome == Outcome.COMPLETED
    assert Effect.objects.filter(run=result.run).count() == 1


@pytest.mark.parametrize(
    ("raw", "bad_field"),
    [pytest.param(raw, field, id=case) for case, raw, field in INVALID_EVENTS],
)
def test_invalid_event_fails_the_run_keeps_the_raw_bytes_and_claims_no_identity(
    pipeline: Pipeline, raw: bytes, bad_field: str
) -> None:
    result = submit_raw(pipeline, raw)

    assert result.code == Outcome.INVALID_EVENT
    assert bad_field in [p.field for p in result.problems]
    run = pipeline.run(result)
    assert run.state == State.FAILED
    assert run.outcome == Outcome.INVALID_EVENT
    assert run.failure_field == bad_field
    assert bad_field in [p["field"] for p in json.loads(run.failure_detail)]
    assert run.finished_at is not None
    assert run.claims_identity is False
    assert bytes(run.intake.raw) == raw
    assert not Effect.objects.exists()
    assert not pipeline.queue  # nothing was sent to the workers
    stage = StageRecord.objects.get(run=run)
    assert (stage.stage, stage.outcome) == ("intake", Outcome.INVALID_EVENT)
    checkpoint = Checkpoint.objects.get(run=run)
    assert checkpoint.state == State.FAILED
    assert bad_field in [p["field"] for p in checkpoint.data["problems"]]
    assert AuditEvent.objects.filter(run=run, action="run.fail", to_state=State.FAILED).exists()

    # A fixed version of the same event id is a new request, not a replay or a conflict.
    fixed = make_event(event_id=run.event_id or "evt-100")
    again = pipeline.submit(fixed, [decision_for(fixed)])

    assert again.code == "accepted"
    assert again.run is not None
    assert again.run.pk != run.pk
    assert pipeline.run(again).outcome == Outcome.COMPLETED
    assert not AuditEvent.objects.filter(action__startswith="intake.").exists()


def test_same_event_twice_is_an_idempotent_replay_of_the_same_run(pipeline: Pipeline) -> None:
    event = make_event()
    first = pipeline.submit(event, [decision_for(event)])
    assert first.run is not None
    before = Run.objects.values().get(pk=first.run.pk)

    second = pipeline.submit(event)

    assert second.code == Outcome.IDEMPOTENT_REPLAY
    assert second.run is not None
    assert second.run.pk == first.run.pk
    assert second.problems == []
    assert Run.objects.count() == 1
    assert Run.objects.values().get(pk=first.run.pk) == before
    assert IntakeRecord.objects.count() == 2
    assert Effect.objects.count() == 1
    audit = AuditEvent.objects.get(action="intake.idempotent_replay")
    assert audit.intake == second.intake
    assert audit.run is None
    assert audit.data["existing_run"] == first.run.pk


def test_replay_while_the_first_run_is_in_progress_starts_no_work(pipeline: Pipeline) -> None:
    event = make_event()
    first = pipeline.submit(event, [decision_for(event)], drain=False)
    pipeline.queue.clear()

    second = submit_raw(pipeline, dumps(event))

    assert second.code == Outcome.IDEMPOTENT_REPLAY
    assert second.run is not None and first.run is not None
    assert second.run.pk == first.run.pk
    assert not pipeline.queue
    assert Run.objects.count() == 1


def test_same_event_id_with_changed_content_is_a_conflict_and_runs_nothing(
    pipeline: Pipeline,
) -> None:
    event = make_event()
    first = pipeline.submit(event, [decision_for(event)])
    assert first.run is not None
    before = Run.objects.values().get(pk=first.run.pk)
    changed = make_event(subject="Changed request", body="Different content, same id.")

    result = submit_raw(pipeline, dumps(changed))

    assert result.code == Outcome.IDEMPOTENCY_CONFLICT
    assert [p.field for p in result.problems] == ["event_id"]
    assert not pipeline.queue
    assert Run.objects.count() == 1
    assert Run.objects.values().get(pk=first.run.pk) == before
    assert Effect.objects.count() == 1
    assert bytes(result.intake.raw) == dumps(changed)
    audit = AuditEvent.objects.get(action="intake.idempotency_conflict")
    assert audit.intake == result.intake
    assert audit.run is None
    assert audit.data["existing_run"] == first.run.pk
    assert audit.data["fingerprint"] != before["fingerprint"]


def test_the_same_event_id_on_two_channels_is_two_requests(
    pipeline: Pipeline, channel: IntakeChannel
) -> None:
    # A JSON event id is the integrator's own: its identity stays per channel (unlike an
    # e-mail's Message-ID, which names one request on every path that takes mail).
    other = Pipeline(
        IntakeChannel.objects.create(
            name="partner",
            classifier="recorded",
            classifier_version=channel.classifier_version,
            workflow_version=channel.workflow_version,
            prompt_version=channel.prompt_version,
        )
    )
    event = make_event(event_id="evt-shared")

    first = pipeline.submit(event, [decision_for(event)])
    second = other.submit(event, [decision_for(event)])

    assert (first.code, second.code) == ("accepted", "accepted")
    runs = Run.objects.filter(event_id="evt-shared", claims_identity=True)
    assert sorted(runs.values_list("identity_scope", flat=True)) == ["partner", "test"]
    keys = set(Effect.objects.values_list("idempotency_key", flat=True))
    assert len(keys) == 2
    assert Task.objects.count() == 2


def test_whitespace_only_differences_are_a_replay_not_a_conflict(pipeline: Pipeline) -> None:
    event = make_event()
    first = pipeline.submit(event, [decision_for(event)])
    assert first.run is not None
    spaced = make_event(
        subject="  Access \t question ",
        body="Please   create a\nfollow-up   for this request.  ",
    )

    result = submit_raw(pipeline, dumps(spaced))

    assert result.code == Outcome.IDEMPOTENT_REPLAY
    assert result.run is not None
    assert result.run.pk == first.run.pk
    assert AuditEvent.objects.get(action="intake.idempotent_replay").data["fingerprint"] == (
        pipeline.run(first).fingerprint
    )
    assert Run.objects.count() == 1


def test_event_id_with_surrounding_whitespace_is_replayed_when_submitted_again(
    pipeline: Pipeline,
) -> None:
    event = make_event(event_id=" evt-100 ")
    first = submit_raw(pipeline, dumps(event))
    pipeline.drain()
    assert first.code == "accepted"

    second = submit_raw(pipeline, dumps(event))

    assert second.code == Outcome.IDEMPOTENT_REPLAY
    assert Run.objects.count() == 1


def test_requested_action_outside_the_allowlist_is_unsupported(pipeline: Pipeline) -> None:
    event = make_event(requested_action="close_account")

    result = submit_raw(pipeline, dumps(event))

    assert result.code == Outcome.UNSUPPORTED_REQUEST
    run = pipeline.run(result)
    assert run.state == State.FAILED
    assert run.outcome == Outcome.UNSUPPORTED_REQUEST
    assert run.failure_field == "requested_action"
    assert run.rules == [
        {
            "rule_id": "allowlist.close_account",
            "passed": False,
            "text": "requested action 'close_account' is not in the allowlist",
        }
    ]
    assert run.finished_at is not None
    assert bytes(run.intake.raw) == dumps(event)
    assert not pipeline.queue
    assert not Effect.objects.exists()
    assert not StageRecord.objects.filter(run=run, stage="classify").exists()
