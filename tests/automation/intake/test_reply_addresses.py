"""Who an `email_reply` is from and where answers go: the effect's own addresses, else its
intake channel's, else the server's (DEFAULT_FROM_EMAIL); sent to a real SMTP server on
127.0.0.1 (tests/mailserver.py) and checked as the message that arrived. An address is one
line: a line break (a header of its own) is refused where it is saved."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.core.exceptions import ValidationError

from automation.intake.services import intake_submit
from automation.models import Effect, EffectStatus, IntakeChannel, Run, State
from policy.services import PolicyError, parse_policy_text
from tests.conftest import Pipeline
from tests.insurer import (
    ACKNOWLEDGEMENT,
    INSURER,
    activate_insurer,
    claim_mail,
    claim_reading,
    insurer_channel,
    insurer_document,
)
from tests.mailserver import Inbox, send_through, smtp_server

SERVER = "Gatehouse <gatehouse@server.example>"
DESK = "Home claims <claims@insurer.example>"
DESK_REPLIES = "claims-team@insurer.example"


@pytest.fixture
def inbox(settings: Any) -> Iterator[Inbox]:
    with smtp_server() as server:
        send_through(settings, server)
        settings.DEFAULT_FROM_EMAIL = SERVER
        yield server


def acknowledged(channel: IntakeChannel) -> Run:
    pipeline = Pipeline(channel)
    with pipeline.capture():
        result = intake_submit(
            channel=channel,
            raw=claim_mail("The kitchen ceiling is wet. Policy POL-2026-004211."),
            content_type="message/rfc822",
            source="test",
        )
    assert result.run is not None
    pipeline.record(result.run.event_id, [{"type": "decision", "value": claim_reading()}])
    pipeline.drain()
    run = Run.objects.get(pk=result.run.pk)
    assert run.state == State.COMPLETED, (run.state, run.outcome, run.failure_detail)
    return run


def own_addresses(**addresses: str) -> dict[str, Any]:
    effects = INSURER["catalogue"]["effects"]
    effect = effects["acknowledge_claim"]
    reply = {"templates": ACKNOWLEDGEMENT, **addresses}
    return {**effects, "acknowledge_claim": {**effect, "email_reply": reply}}


def test_a_reply_from_a_channel_with_its_own_address_leaves_with_it(db: None, inbox: Inbox) -> None:
    activate_insurer()
    run = acknowledged(insurer_channel(reply_from=DESK, reply_to=DESK_REPLIES))

    (received,) = inbox.received
    effect = Effect.objects.get(run=run)
    assert received.sender == "claims@insurer.example"
    assert received.message["From"] == DESK
    assert received.message["Reply-To"] == DESK_REPLIES
    assert received.message["Message-ID"] == f"<{effect.idempotency_key[:40]}@insurer.example>"
    assert effect.payload["request"]["from"] == DESK


def test_the_effects_own_address_wins_over_the_channels(db: None, inbox: Inbox) -> None:
    activate_insurer(effects=own_addresses(from_address="Claims <ack@claims.example>"))
    acknowledged(insurer_channel(reply_from=DESK, reply_to=DESK_REPLIES))

    (received,) = inbox.received
    assert received.message["From"] == "Claims <ack@claims.example>"
    assert received.message["Reply-To"] == DESK_REPLIES  # the effect names none of its own


def test_with_no_address_of_its_own_a_reply_is_from_the_servers(db: None, inbox: Inbox) -> None:
    activate_insurer()
    acknowledged(insurer_channel())

    (received,) = inbox.received
    assert received.message["From"] == SERVER
    assert received.message["Reply-To"] is None


@pytest.mark.parametrize(
    "address",
    ["claims@insurer.example\r\nBcc: all@victims.example", "a@x.example, b@y.example", "nobody"],
)
def test_an_address_that_is_not_one_is_refused_where_it_is_saved(db: None, address: str) -> None:
    document = insurer_document(effects=own_addresses(reply_to=address))
    with pytest.raises(PolicyError) as refused:
        parse_policy_text(yaml.safe_dump(document))
    assert "catalogue.effects.acknowledge_claim.email_reply.reply_to" in str(refused.value)

    channel = IntakeChannel(name="bad-reply", workflow_version="w", prompt_version="p")
    channel.reply_from = address
    with pytest.raises(ValidationError) as invalid:
        channel.full_clean()
    assert set(invalid.value.message_dict) == {"reply_from"}


def test_an_address_saved_past_its_checks_is_never_sent(db: None, inbox: Inbox) -> None:
    activate_insurer()
    channel = insurer_channel()
    IntakeChannel.objects.filter(pk=channel.pk).update(
        reply_from="claims@insurer.example\r\nBcc: all@victims.example"
    )
    channel.refresh_from_db()
    pipeline = Pipeline(channel)
    with pipeline.capture():
        result = intake_submit(
            channel=channel,
            raw=claim_mail("Policy POL-2026-004211."),
            content_type="message/rfc822",
            source="test",
        )
    assert result.run is not None
    pipeline.record(result.run.event_id, [{"type": "decision", "value": claim_reading()}])
    pipeline.drain()

    effect = Effect.objects.get(run_id=result.run.pk)
    assert (effect.status, inbox.received) == (EffectStatus.REJECTED, [])
    (attempt,) = effect.attempt_rows.all()
    assert "From is not an address to send with" in attempt.detail
