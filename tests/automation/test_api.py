"""The integrators' JSON API: bearer token, clear 4xx answers, nothing half-written."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.test import Client

from approvals.models import ApprovalRequest
from automation import services
from automation.models import AuditEvent, Effect, IntakeChannel, IntakeRecord, Outcome, Run, State
from automation.roles import roles_ensure
from config.dispatch import Message, inline
from policy.models import PolicyVersion
from tests.conftest import Pipeline, decision_for, make_event

EVENTS = "/api/v1/events"


@pytest.fixture
def key(channel: IntakeChannel) -> str:
    return services.api_token_create(name="integrator", channel=channel)[1]


def post(
    client: Client, raw: bytes, key: str | None, content_type: str = "application/json"
) -> Any:
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    return client.post(EVENTS, data=raw, content_type=content_type, headers=headers)


def dumps(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def assert_nothing_stored() -> None:
    assert not IntakeRecord.objects.exists()
    assert not Run.objects.exists()


def assert_failed_whole(run_id: int, outcome: str) -> None:
    """Stored and failed: the raw input kept, and no effect or approval beside it."""
    run = Run.objects.get(pk=run_id)
    assert (run.state, run.outcome) == (State.FAILED, outcome)
    assert IntakeRecord.objects.filter(pk=run.intake_id).exists()
    assert not Effect.objects.exists()
    assert not ApprovalRequest.objects.exists()


def test_new_event_is_accepted_with_its_run(
    client: Client, key: str, channel: IntakeChannel
) -> None:
    with inline() as queue:
        response = post(client, dumps(make_event()), key)

    assert response.status_code == 202
    body = response.json()
    run = Run.objects.get(pk=body["run"]["id"])
    assert body["outcome"] == "accepted"
    assert body["run"]["state"] == State.RECEIVED
    assert body["run"]["url"] == f"/api/v1/runs/{run.pk}"
    assert body["intake_id"] == run.intake_id
    assert run.channel == channel
    assert run.intake.source == "api:integrator"
    assert bytes(run.intake.raw) == dumps(make_event())
    assert not queue  # the test's transaction never commits: nothing may have been sent


def test_commit_sends_exactly_one_advance_message(
    client: Client, key: str, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    with inline() as queue:
        with django_capture_on_commit_callbacks(execute=True):
            response = post(client, dumps(make_event()), key)
            assert not queue
        run_id = response.json()["run"]["id"]

    assert list(queue) == [Message(services.ADVANCE_RUN_TASK, (run_id,))]


def test_same_event_again_answers_200_with_the_same_run(client: Client, key: str) -> None:
    first = post(client, dumps(make_event()), key)

    second = post(client, dumps(make_event()), key)

    assert second.status_code == 200
    assert second.json()["outcome"] == Outcome.IDEMPOTENT_REPLAY
    assert second.json()["run"]["id"] == first.json()["run"]["id"]
    assert Run.objects.count() == 1


def test_same_event_id_with_changed_content_answers_409(client: Client, key: str) -> None:
    first = post(client, dumps(make_event()), key)

    response = post(client, dumps(make_event(subject="Something else")), key)

    assert response.status_code == 409
    body = response.json()
    assert body["outcome"] == Outcome.IDEMPOTENCY_CONFLICT
    assert body["run"]["id"] == first.json()["run"]["id"]
    assert [p["field"] for p in body["problems"]] == ["event_id"]
    assert Run.objects.count() == 1


def test_invalid_event_answers_422_naming_each_field(
    client: Client, key: str, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    event = {**make_event(source="fax", body="   "), "priority": "high"}

    with inline() as queue, django_capture_on_commit_callbacks(execute=True):
        response = post(client, dumps(event), key)

    assert not queue  # nothing for the workers to do

    assert response.status_code == 422
    body = response.json()
    assert body["outcome"] == Outcome.INVALID_EVENT
    assert {p["field"] for p in body["problems"]} == {"source", "body", "priority"}
    assert all(p["message"] for p in body["problems"])
    assert body["run"]["state"] == State.FAILED
    assert_failed_whole(body["run"]["id"], Outcome.INVALID_EVENT)


def test_unsupported_request_answers_422(client: Client, key: str) -> None:
    response = post(client, dumps(make_event(requested_action="close_account")), key)

    assert response.status_code == 422
    body = response.json()
    assert body["outcome"] == Outcome.UNSUPPORTED_REQUEST
    assert body["run"]["outcome"] == Outcome.UNSUPPORTED_REQUEST
    assert_failed_whole(body["run"]["id"], Outcome.UNSUPPORTED_REQUEST)


def test_malformed_json_answers_400_and_keeps_the_bytes(client: Client, key: str) -> None:
    raw = b'{"event_id": "evt-100", '

    response = post(client, raw, key)

    assert response.status_code == 400
    body = response.json()
    assert body["outcome"] == Outcome.INVALID_EVENT
    assert [p["field"] for p in body["problems"]] == ["body"]
    assert bytes(IntakeRecord.objects.get().raw) == raw
    assert_failed_whole(body["run"]["id"], Outcome.INVALID_EVENT)


def test_text_plain_answers_415_and_stores_nothing(client: Client, key: str) -> None:
    response = post(client, dumps(make_event()), key, content_type="text/plain")

    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
    assert_nothing_stored()


def test_body_over_the_limit_answers_413_and_stores_nothing(client: Client, key: str) -> None:
    limit = settings.GATEHOUSE["MAX_EVENT_BYTES"]
    raw = dumps(make_event(body="x" * limit))
    assert len(raw) > limit

    response = post(client, raw, key)

    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
    assert_nothing_stored()


def test_body_at_the_limit_is_not_refused_for_size(client: Client, key: str) -> None:
    limit = settings.GATEHOUSE["MAX_EVENT_BYTES"]
    raw = dumps(make_event(body="x"))
    raw = raw.replace(b'"x"', b'"' + b"x" * (limit - len(raw) + 1) + b'"')
    assert len(raw) == limit

    response = post(client, raw, key)

    assert response.status_code != 413
    assert IntakeRecord.objects.count() == 1


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(None, id="no-header"),
        pytest.param("Bearer not-a-token", id="wrong-token"),
        pytest.param("Bearer ", id="empty-token"),
        pytest.param("Basic dXNlcjpwdw==", id="other-scheme"),
    ],
)
def test_missing_or_wrong_token_answers_401_and_stores_nothing(
    client: Client, key: str, authorization: str | None
) -> None:
    headers = {"authorization": authorization} if authorization is not None else {}

    response = client.post(
        EVENTS, data=dumps(make_event()), content_type="application/json", headers=headers
    )

    assert response.status_code == 401
    assert response.json()["error"] == "unauthenticated"
    assert_nothing_stored()


def test_revoked_token_answers_401(client: Client, channel: IntakeChannel) -> None:
    token, revoked = services.api_token_create(name="old", channel=channel)
    token.is_active = False
    token.save(update_fields=["is_active"])

    assert post(client, dumps(make_event()), revoked).status_code == 401
    assert_nothing_stored()


def test_get_on_events_is_not_allowed(client: Client, key: str) -> None:
    response = client.get(EVENTS, headers={"authorization": f"Bearer {key}"})

    assert response.status_code == 405
    assert_nothing_stored()


def test_run_detail_shows_state_versions_and_timed_stages(
    pipeline: Pipeline, client: Client, key: str
) -> None:
    event = make_event()
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))

    response = client.get(f"/api/v1/runs/{run.pk}", headers={"authorization": f"Bearer {key}"})

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["event_id"]) == (run.pk, "evt-100")
    assert (body["state"], body["outcome"]) == (State.COMPLETED, Outcome.COMPLETED)
    assert body["versions"] == {
        "workflow": "workflow-1",
        "classifier": "recorded-classifier-1",
        "prompt": "prompt-1",
        "policy": "policy-1",
    }
    assert body["fingerprint"] == run.fingerprint
    assert (body["route"], body["effect"]) == ("service_desk", "create_follow_up")
    assert body["failure"] is None
    assert body["finished_at"] is not None
    assert [s["stage"] for s in body["stages"]] == [
        "intake",
        "validate",
        "normalize",
        "enrich",
        "classify",
        "decide",
        "execute",
        "complete",
    ]
    for stage in body["stages"]:
        assert stage["duration_ms"] >= 0
        assert stage["started_at"]
        assert stage["outcome"]
    assert body["checkpoints"] == 4


def test_run_detail_of_an_invalid_event_names_the_failure(client: Client, key: str) -> None:
    run_id = post(client, dumps(make_event(source="fax")), key).json()["run"]["id"]

    body = client.get(f"/api/v1/runs/{run_id}", headers={"authorization": f"Bearer {key}"}).json()

    assert (body["state"], body["outcome"]) == (State.FAILED, Outcome.INVALID_EVENT)
    assert body["failure"]["field"] == "source"
    assert body["versions"]["policy"] is None


def test_run_of_another_channel_answers_404(client: Client, key: str) -> None:
    run_id = post(client, dumps(make_event()), key).json()["run"]["id"]
    other = IntakeChannel.objects.create(
        name="other", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    _, other_key = services.api_token_create(name="other-integrator", channel=other)

    response = client.get(
        f"/api/v1/runs/{run_id}", headers={"authorization": f"Bearer {other_key}"}
    )

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert "run" not in response.json()


def test_run_detail_needs_a_token(client: Client, key: str) -> None:
    run_id = post(client, dumps(make_event()), key).json()["run"]["id"]

    assert client.get(f"/api/v1/runs/{run_id}").status_code == 401


def test_well_formed_json_that_is_not_an_object_answers_422(client: Client, key: str) -> None:
    response = post(client, b'["evt-100", "support"]', key)

    assert response.status_code == 422
    assert response.json()["outcome"] == Outcome.INVALID_EVENT


@pytest.mark.django_db
def test_a_revoked_token_is_refused_and_the_revocation_recorded(channel: IntakeChannel) -> None:
    token, key = services.api_token_create(name="partner", channel=channel)
    admin_user = User.objects.create_user("root", is_superuser=True)

    assert services.api_tokens_revoke(token_ids=[token.pk], user=admin_user) == 1

    response = Client().post(
        "/api/v1/events",
        dumps(make_event()),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 401
    assert AuditEvent.objects.filter(action="api_token.revoked", actor=admin_user).exists()


def test_with_no_active_policy_intake_answers_503_and_keeps_the_raw_request(
    client: Client, key: str
) -> None:
    PolicyVersion.objects.filter(is_active=True).update(is_active=False)

    response = post(client, dumps(make_event()), key)

    assert response.status_code == 503
    assert response.json()["error"] == "no_active_policy"
    assert "load_policy" in response.json()["message"]
    assert IntakeRecord.objects.count() == 1  # kept for when a policy is loaded
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_auditors_and_recovery_staff_cannot_revoke_a_token(channel: IntakeChannel) -> None:
    roles_ensure()
    token, key = services.api_token_create(name="partner", channel=channel)
    for group in ("auditors", "recovery-staff"):
        person = User.objects.create_user(f"someone-{group}", is_staff=True)
        person.groups.add(Group.objects.get(name=group))
        client = Client()
        client.force_login(person)

        client.post(
            "/admin/automation/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
        )
        with pytest.raises(PermissionDenied):
            services.api_tokens_revoke(token_ids=[token.pk], user=person)

    token.refresh_from_db()
    assert token.is_active
    assert not AuditEvent.objects.filter(action="api_token.revoked").exists()
    assert post(Client(), dumps(make_event()), key).status_code == 202
