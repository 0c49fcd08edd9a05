"""`http` effects shaped by the catalogue: a templated JSON body, credentials by the name of
an environment variable, sent to a real receiver on 127.0.0.1 (tests/downstream.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from automation.effects.services import effect_deliver
from automation.models import Effect, EffectAttempt, EffectStatus, Run, State
from tests.catalogues import SIGNING_VARIABLE, activate_effects, http_effect
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream

SECRET = "t" * 32
TOKEN_VARIABLE = "TEST_EFFECT_HELPDESK_TOKEN"
BODY = {
    "ticket": {
        "subject": "{{ run.subject }}",
        "comment": {"body": "{{ run.body }}", "public": False},
        "custom_fields": [{"id": 360001, "value": "{{ params.order }}"}],
        "tags": ["gatehouse", "{{ run.category }}"],
    }
}


@pytest.fixture
def downstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[Downstream]:
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    monkeypatch.setenv(TOKEN_VARIABLE, "Bearer helpdesk-token-1")
    with running_downstream(SECRET) as server:
        yield server


@pytest.fixture
def ticket(pipeline: Pipeline, downstream: Downstream) -> None:
    """The follow-up opens a ticket in a helpdesk's shape."""
    effect = http_effect(
        downstream.url,
        headers={"Authorization": {"secret": TOKEN_VARIABLE}, "X-Desk": "support"},
        body=BODY,
    )
    effect["parameters"] = {
        "order": {"value": "{{ fields.reference }}", "type": "reference", "required": False}
    }
    activate_effects({"create_follow_up": effect})


def submit(pipeline: Pipeline, **event: Any) -> tuple[Run, Effect]:
    sent = make_event(**event)
    fields = {"reference": {"value": "ORD-4411", "confidence": 0.9, "source": "ORD-4411"}}
    result = pipeline.submit(sent, [decision_for(sent, fields=fields)])
    run = pipeline.run(result)
    return run, Effect.objects.get(run=run)


def test_the_receiver_gets_the_templated_body_with_the_credential_from_the_environment(
    pipeline: Pipeline, downstream: Downstream, ticket: None
) -> None:
    run, effect = submit(pipeline, subject="Printer jammed", body="It jams on page two.")

    (received,) = downstream.requests
    assert received.payload == {
        "ticket": {
            "subject": "Printer jammed",
            "comment": {"body": "It jams on page two.", "public": False},
            "custom_fields": [{"id": 360001, "value": "ORD-4411"}],
            "tags": ["gatehouse", "support"],
        }
    }
    assert received.headers["Authorization"] == "Bearer helpdesk-token-1"
    assert received.headers["X-Desk"] == "support"
    assert received.key == effect.idempotency_key
    assert received.signature_valid
    effect.refresh_from_db()
    assert (Run.objects.get(pk=run.pk).state, effect.status) == (
        State.COMPLETED,
        EffectStatus.DELIVERED,
    )
    # The body is kept with the effect, the credential never is.
    assert effect.payload["request"]["body"] == received.payload
    assert "helpdesk-token-1" not in str(effect.payload)


def test_quotes_and_braces_in_a_value_never_change_the_body_s_shape(
    pipeline: Pipeline, downstream: Downstream, ticket: None
) -> None:
    hostile = 'Broken "}, "admin": true, {" {{ 7*7 }}'

    submit(pipeline, subject=hostile)

    (received,) = downstream.requests
    assert received.payload["ticket"]["subject"] == hostile
    assert set(received.payload["ticket"]) == set(BODY["ticket"])


def test_a_retry_sends_the_same_body_and_the_receiver_performs_it_once(
    pipeline: Pipeline, downstream: Downstream, ticket: None
) -> None:
    downstream.then(("status", 503, {}))

    run, effect = submit(pipeline)
    effect.refresh_from_db()
    assert effect.status == EffectStatus.RETRY_WAIT
    effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)
    effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)  # a duplicate message

    first, second = downstream.requests
    assert first.body == second.body and first.key == second.key
    assert downstream.performed == [effect.idempotency_key]
    assert Run.objects.get(pk=run.pk).state == State.COMPLETED


def test_a_credential_whose_variable_is_not_set_sends_nothing_until_it_is(
    pipeline: Pipeline, downstream: Downstream, ticket: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_VARIABLE)

    _, effect = submit(pipeline)

    effect.refresh_from_db()
    assert (downstream.requests, effect.status) == ([], EffectStatus.RETRY_WAIT)
    attempt = EffectAttempt.objects.get(effect=effect)
    assert attempt.error_class == "MissingSecret"
    assert TOKEN_VARIABLE in attempt.detail
    monkeypatch.setenv(TOKEN_VARIABLE, "Bearer helpdesk-token-1")
    assert effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at) == "delivered"
    assert len(downstream.requests) == 1
