"""The integrators' JSON API: bearer token, clear 4xx answers, nothing half-written."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.test import Client

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from automation.intake.services import api_token_create, api_tokens_revoke, channel_get_or_create
from automation.models import AuditEvent, Effect, IntakeChannel, IntakeRecord, Outcome, Run, State
from automation.runs.sending import ADVANCE_RUN_TASK
from automation.schemas import MAX_JSON_DEPTH
from policy.models import PolicyVersion
from tests.conftest import Pipeline, decision_for, make_event
from tests.servers import gunicorn
from worker.dispatch import Message, inline

EVENTS = "/api/v1/events"


@pytest.fixture
def key(channel: IntakeChannel) -> str:
    return api_token_create(name="integrator", channel=channel)[1]


def post(
    client: Client,
    raw: bytes,
    key: str | None,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Any:
    sent = {"authorization": f"Bearer {key}"} if key is not None else {}
    return client.post(EVENTS, data=raw, content_type=content_type, headers=sent | (headers or {}))


MAIL = (
    b"From: Ana Ortiz <ana@example.com>\r\nTo: requests@gatehouse.test\r\n"
    b"Subject: Quote for 40 more seats\r\nMessage-ID: <quote-api-1@example.com>\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n\r\nCould you send a quote for 40 seats?\r\n"
)


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
    assert body["run"]["links"] == {"run_page": f"http://testserver/runs/{run.pk}/"}
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

    assert list(queue) == [Message(ADVANCE_RUN_TASK, (run_id,))]


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


# --- a body sent in chunks, to the real servers -----------------------------------------------


def send_chunked(base_url: str, raw: bytes, key: str) -> tuple[int, dict[str, Any]]:
    """POST `raw` in chunks of 1,000 bytes (Transfer-Encoding: chunked, no Content-Length), as
    many HTTP clients and proxies send a body."""
    address = urlsplit(base_url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    chunks = (raw[i : i + 1000] for i in range(0, len(raw), 1000))
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Transfer-Encoding": "chunked",
    }
    conn.request("POST", EVENTS, body=chunks, headers=headers, encode_chunked=True)
    response = conn.getresponse()
    answer = (response.status, json.loads(response.read()))
    conn.close()
    return answer


@pytest.mark.django_db(transaction=True)
def test_gunicorn_reads_a_chunked_body_within_the_same_limit(key: str) -> None:
    event = dumps(make_event(body="Please create a follow-up. " * 100))
    limit = settings.GATEHOUSE["MAX_EVENT_BYTES"]
    over = dumps(make_event(event_id="evt-big", body="x" * limit))

    with gunicorn() as base_url:
        status, body = send_chunked(base_url, event, key)
        refused, refusal = send_chunked(base_url, over, key)

    assert (status, body["outcome"]) == (202, "accepted"), body
    assert bytes(IntakeRecord.objects.get(pk=body["intake_id"]).raw) == event
    assert (refused, refusal["error"]) == (413, "too_large")
    assert IntakeRecord.objects.count() == 1  # the one over the limit is not stored


@pytest.mark.django_db(transaction=True)
def test_a_server_that_cannot_read_a_chunked_body_answers_411_storing_nothing(
    key: str, live_server: Any
) -> None:
    """The development server (runserver's, which the live test server is) passes the chunks
    on undecoded: the body is refused, not read as empty."""
    status, body = send_chunked(live_server.url, dumps(make_event()), key)

    assert (status, body["error"]) == (411, "length_required")
    assert "Content-Length" in body["message"]
    assert_nothing_stored()


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
    token, revoked = api_token_create(name="old", channel=channel)
    token.is_active = False
    token.save(update_fields=["is_active"])

    assert post(client, dumps(make_event()), revoked).status_code == 401
    assert_nothing_stored()


def test_get_on_events_is_not_allowed(client: Client, key: str) -> None:
    response = client.get(EVENTS, headers={"authorization": f"Bearer {key}"})

    assert response.status_code == 405
    assert_nothing_stored()


# --- every answer under /api/ is JSON, in the error shape ----------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "error", "allow"),
    [
        ("get", "/api/v1/runs/abc", 404, "not_found", None),
        ("get", "/api/v1/runs/-1", 404, "not_found", None),
        ("get", "/api/v1/nothing", 404, "not_found", None),
        ("get", "/api/", 404, "not_found", None),
        ("put", "/api/v1/runs/1", 405, "method_not_allowed", "GET"),
        ("post", "/api/v1/runs/1", 405, "method_not_allowed", "GET"),
        ("patch", "/api/v1/runs/1", 405, "method_not_allowed", "GET"),
        ("delete", "/api/v1/runs/1", 405, "method_not_allowed", "GET"),
        ("get", EVENTS, 405, "method_not_allowed", "POST"),
        ("put", EVENTS, 405, "method_not_allowed", "POST"),
        ("post", "/api/v1/openapi.json", 405, "method_not_allowed", "GET"),
        ("get", "/api/v1/runs/1?x=%00", 400, "bad_request", None),
    ],
)
def test_every_refusal_under_the_api_is_json_in_the_error_shape(
    key: str, method: str, path: str, status: int, error: str, allow: str | None
) -> None:
    # As a real client meets it: with CSRF enforced, as it is outside the test client.
    client = Client(enforce_csrf_checks=True)

    response = getattr(client, method)(path, headers={"authorization": f"Bearer {key}"})

    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == error, body
    assert response.get("Allow") == allow
    assert_nothing_stored()


def test_a_failure_inside_the_api_is_answered_in_json(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr("automation.api.run_for_channel", broken)
    client = Client(raise_request_exception=False)

    response = client.get("/api/v1/runs/1", headers={"authorization": f"Bearer {key}"})

    assert response.status_code == 500
    assert response.json()["error"] == "server_error"
    assert "the database went away" not in response.content.decode()


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
    assert body["links"] == {"run_page": f"http://testserver/runs/{run.pk}/"}
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
    _, other_key = api_token_create(name="other-integrator", channel=other)

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
    token, key = api_token_create(name="partner", channel=channel)
    admin_user = User.objects.create_user("root", is_superuser=True)

    assert api_tokens_revoke(token_ids=[token.pk], user=admin_user) == 1

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
    # No run, so the record says why: nobody has to guess what became of it.
    assert "no policy version is active" in IntakeRecord.objects.get().admission_error


@pytest.mark.django_db
def test_auditors_and_recovery_staff_cannot_revoke_a_token(channel: IntakeChannel) -> None:
    roles_ensure()
    token, key = api_token_create(name="partner", channel=channel)
    for group in ("auditors", "recovery-staff"):
        person = User.objects.create_user(f"someone-{group}", is_staff=True)
        person.groups.add(Group.objects.get(name=group))
        client = Client()
        client.force_login(person)

        client.post(
            "/admin/automation/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
        )
        with pytest.raises(PermissionDenied):
            api_tokens_revoke(token_ids=[token.pk], user=person)

    token.refresh_from_db()
    assert token.is_active
    assert not AuditEvent.objects.filter(action="api_token.revoked").exists()
    assert post(Client(), dumps(make_event()), key).status_code == 202


@pytest.mark.django_db
def test_a_revoked_token_cannot_be_switched_on_again_or_deleted(channel: IntakeChannel) -> None:
    roles_ensure()
    token, key = api_token_create(name="partner", channel=channel)
    lead = User.objects.create_user("lead", is_staff=True)
    lead.groups.add(Group.objects.get(name="ops-leads"))
    root = User.objects.create_user("root", is_staff=True, is_superuser=True)
    api_tokens_revoke(token_ids=[token.pk], user=lead)
    change = f"/admin/automation/apitoken/{token.pk}/change/"

    for person in (lead, root):
        client = Client()
        client.force_login(person)
        client.post(change, {"name": "partner", "channel": channel.pk, "is_active": "on"})
        client.post(f"/admin/automation/apitoken/{token.pk}/delete/", {"post": "yes"})
        client.post(
            "/admin/automation/apitoken/",
            {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"},
        )

    token.refresh_from_db()
    assert not token.is_active
    assert post(Client(), dumps(make_event()), key).status_code == 401


# --- hostile input: a clear 4xx, the bytes kept with a run, never a 500 ----------------------

# Text PostgreSQL cannot hold in text or jsonb columns: a NUL, and a lone surrogate (valid
# in JSON's \u escapes, never a character).
UNSTORABLE = {"nul": "a\x00b", "surrogate": "a\ud800b"}


def assert_refused_and_kept(response: Any, raw: bytes, status: int, field: str) -> dict[str, Any]:
    """Refused with a 4xx that names the field; the exact bytes kept, with an invalid run."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["outcome"] == Outcome.INVALID_EVENT
    assert field in [p["field"] for p in body["problems"]], body["problems"]
    record = IntakeRecord.objects.get()
    assert bytes(record.raw) == raw
    assert_failed_whole(body["run"]["id"], Outcome.INVALID_EVENT)
    assert Run.objects.get().intake == record  # one record, and it is no orphan
    return body


@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=list(UNSTORABLE))
@pytest.mark.parametrize("field", ["event_id", "subject", "body", "requested_action"])
def test_text_the_database_cannot_store_answers_422_naming_the_field(
    client: Client, key: str, field: str, text: str
) -> None:
    raw = dumps(make_event(**{field: text}))

    body = assert_refused_and_kept(post(client, raw, key), raw, 422, field)

    assert "cannot be stored" in body["problems"][0]["message"]


@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=list(UNSTORABLE))
def test_a_key_the_database_cannot_store_is_named_in_a_storable_spelling(
    client: Client, key: str, text: str
) -> None:
    raw = dumps({**make_event(), text: "x"})

    body = assert_refused_and_kept(post(client, raw, key), raw, 422, "a\ufffdb")

    run = Run.objects.get()
    assert run.failure_field == "a\ufffdb"
    assert "a\ufffdb" in json.dumps(run.checkpoints.get().data, ensure_ascii=False)
    assert all("\x00" not in p["field"] for p in body["problems"])


@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=list(UNSTORABLE))
def test_unstorable_text_nested_anywhere_is_named_by_its_path(
    client: Client, key: str, text: str
) -> None:
    raw = dumps({**make_event(), "extra": {"list": ["fine", {"inner": text}]}})

    assert_refused_and_kept(post(client, raw, key), raw, 422, "extra.list.1.inner")


def test_an_unstorable_event_id_is_kept_on_the_invalid_run_in_a_storable_spelling(
    client: Client, key: str
) -> None:
    raw = dumps(make_event(event_id="evt-\x00-1", subject="a\ud800b"))

    assert_refused_and_kept(post(client, raw, key), raw, 422, "subject")

    assert Run.objects.get().event_id == "evt-\ufffd-1"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(dumps(make_event(subject="x")).replace(b'"x"', b'"a\x00b"'), id="nul-byte"),
        pytest.param(b'{"subject": "\xff\xfe\x00\xed\xa0\x80"}', id="not-utf-8"),
    ],
)
def test_raw_bytes_json_cannot_carry_are_kept_exactly_and_answered_400(
    client: Client, key: str, raw: bytes
) -> None:
    assert_refused_and_kept(post(client, raw, key), raw, 400, "body")


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            dumps(make_event())[:-1] + b', "n": ' + b"7" * 4301 + b"}", id="in-an-extra-key"
        ),
        pytest.param(dumps(make_event(event_id="x")).replace(b'"x"', b"1" * 5000), id="as-a-value"),
        pytest.param(b"-" + b"9" * 20_000, id="the-whole-body"),
    ],
)
def test_a_number_too_long_to_read_answers_400(client: Client, key: str, raw: bytes) -> None:
    body = assert_refused_and_kept(post(client, raw, key), raw, 400, "body")

    assert "digits" in body["problems"][0]["message"]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 990, 30_000])
def test_nesting_past_the_limit_answers_400_and_states_the_limit(
    client: Client, key: str, depth: int
) -> None:
    # The object is the first level: `depth` arrays in it nest one level past the limit.
    raw = dumps(make_event())[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"

    body = assert_refused_and_kept(post(client, raw, key), raw, 400, "body")

    assert f"{MAX_JSON_DEPTH} levels" in body["problems"][0]["message"]


def test_nesting_within_the_limit_is_an_ordinary_invalid_event(client: Client, key: str) -> None:
    depth = MAX_JSON_DEPTH - 1
    raw = dumps(make_event())[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"

    assert_refused_and_kept(post(client, raw, key), raw, 422, "deep")


def test_a_field_name_longer_than_its_column_is_named_clipped(client: Client, key: str) -> None:
    raw = dumps({**make_event(), "k" * 5000: "x"})

    body = assert_refused_and_kept(post(client, raw, key), raw, 422, "k" * 200)

    assert Run.objects.get().failure_field == "k" * 200
    assert body["problems"][0]["message"] == "is not part of the contract"


def test_a_subject_longer_than_the_records_it_makes_answers_422(client: Client, key: str) -> None:
    raw = dumps(make_event(subject="s" * 501))

    body = assert_refused_and_kept(post(client, raw, key), raw, 422, "subject")

    assert "500 characters" in body["problems"][0]["message"]


def test_hostile_requests_sent_again_each_get_their_own_invalid_run(
    client: Client, key: str
) -> None:
    raw = dumps(make_event(subject="a\x00b"))

    statuses = [post(client, raw, key).status_code for _ in range(3)]

    assert statuses == [422, 422, 422]
    assert IntakeRecord.objects.count() == 3
    assert not IntakeRecord.objects.filter(runs__isnull=True).exists()


# --- the run's page for people -----------------------------------------------------------


def test_the_run_page_link_opens_the_run_for_an_ops_lead_and_follows_the_host(
    client: Client, key: str, settings: Any
) -> None:
    settings.ALLOWED_HOSTS = ["gatehouse.example.com"]
    response = post(client, dumps(make_event()), key, headers={"host": "gatehouse.example.com"})
    link = response.json()["run"]["links"]["run_page"]
    run = Run.objects.get()
    assert link == f"http://gatehouse.example.com/runs/{run.pk}/"

    roles_ensure()
    lead = User.objects.create_user("lead")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    people = Client()
    people.force_login(lead)
    page = people.get(
        link.removeprefix("http://gatehouse.example.com"), HTTP_HOST="gatehouse.example.com"
    )
    assert page.status_code == 200
    assert "evt-100" in page.content.decode()


def test_an_https_request_gets_an_https_link(client: Client, key: str) -> None:
    response = client.post(
        EVENTS,
        data=dumps(make_event()),
        content_type="application/json",
        headers={"authorization": f"Bearer {key}"},
        secure=True,
    )

    assert response.json()["run"]["links"]["run_page"].startswith("https://testserver/runs/")


def test_a_duplicate_of_another_channels_run_names_no_link(
    client: Client, key: str, channel: IntakeChannel
) -> None:
    mailbox = channel_get_or_create(name="email")
    _, mailbox_key = api_token_create(name="mail-gateway", channel=mailbox)
    first = post(client, MAIL, mailbox_key, content_type="message/rfc822")
    assert "links" in first.json()["run"]

    again = post(client, MAIL, key, content_type="message/rfc822")

    assert again.json()["outcome"] == Outcome.IDEMPOTENT_REPLAY
    assert "url" not in again.json()["run"] and "links" not in again.json()["run"]
