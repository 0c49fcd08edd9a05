"""A signed delivery to the demo's receiver (served for real by the live test server) that
is retried within the same second as its first attempt: the retry signs anew, the receiver
performs it once, the run completes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from pytest_django.fixtures import Settings as SettingsWrapper

from accounts.roles import roles_ensure
from automation.effects.services import effect_deliver
from automation.models import Effect, EffectAttempt, EffectStatus, Outcome, State
from devtools.receiver.models import Delivery, Receipt
from tests.catalogues import SIGNING_VARIABLE, activate_effects, http_effect
from tests.conftest import Pipeline, decision_for, make_event

SECRET = "demo-secret-for-tests-0123456789"
EFFECT = "send_internal_notification"
# Half past a whole second: both attempts are signed in it, whatever the machine's speed.
FROZEN = datetime(2026, 12, 4, 9, 30, 0, 500_000, tzinfo=UTC)


@pytest.fixture
def demo_receiver(
    settings: SettingsWrapper, monkeypatch: pytest.MonkeyPatch, live_server: Any, policy: None
) -> None:
    """The notification goes to the demo's receiver as the demo configures it (signed, two
    attempts); the receiver fails every request on purpose until the test says otherwise."""
    settings.DEMO_RECEIVER_SECRET = SECRET
    settings.DEMO_RECEIVER_FAILURE_RATE = 1.0
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    roles_ensure()
    url = f"{live_server.url}/demo/receiver/{EFFECT}"
    activate_effects({EFFECT: http_effect(url, max_attempts=2, deadline_seconds=600)})


@pytest.mark.django_db(transaction=True)
def test_a_signed_retry_in_the_same_second_is_delivered_once_and_the_run_completes(
    pipeline: Pipeline, demo_receiver: None, settings: SettingsWrapper
) -> None:
    event = make_event(
        event_id="evt-same-second",
        request_type="billing",
        subject="Invoice copy",
        body="Please let finance know about this invoice.",
        requested_action=EFFECT,
    )
    with time_machine.travel(FROZEN, tick=False):
        run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
        effect = Effect.objects.get(run=run)
        assert (effect.status, effect.response_status) == (EffectStatus.RETRY_WAIT, 503)
        settings.DEMO_RECEIVER_FAILURE_RATE = 0.0  # the receiver is back

        effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)

    run.refresh_from_db()
    effect.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 2)
    outcomes = EffectAttempt.objects.filter(effect=effect).order_by("attempt")
    assert [(row.outcome, row.status_code) for row in outcomes] == [
        ("retry", 503),
        ("delivered", 201),
    ]
    (receipt,) = Receipt.objects.all()
    assert receipt.idempotency_key == effect.idempotency_key
    assert effect.response_ref == f"receipt:{receipt.pk}"
    # Both attempts were signed in the same second, each with its own signature.
    first, second = Delivery.objects.order_by("pk")
    assert (first.status, second.status) == (503, 201)
    assert first.idempotency_key == second.idempotency_key == effect.idempotency_key
    assert (
        first.signature.split(",")[0]
        == second.signature.split(",")[0]
        == (f"t={int(FROZEN.timestamp())}")
    )
    assert first.signature != second.signature
