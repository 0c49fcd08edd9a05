"""`email_reply` effects: a reply to the sender in the request's thread, sent to a real SMTP
server on 127.0.0.1 (tests/mailserver.py), checked as the message that arrived."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from automation.effects.services import effect_deliver
from automation.intake.customers import customers_load
from automation.intake.services import channel_get_or_create
from automation.mail import parse_message
from automation.models import Effect, EffectStatus, IntakeChannel, Run, State
from tests.catalogues import activate_effects, email_reply_effect
from tests.conftest import Pipeline
from tests.mailserver import Inbox, send_through, smtp_server

MAIL = Path(__file__).resolve().parents[2] / "data" / "mail"
ENGLISH = "01-quote-request-northwind.eml"
GERMAN = "02-angebot-lizenzen-brightwater.eml"
TEMPLATES = {
    "en": {
        "subject": "Re: {{ run.subject }}",
        "body": "Hello {{ customer.name or 'there' }},\n\nwe have your request "
        "{{ run.event_id }} and will answer it within a day.\n",
    },
    "de": {
        "subject": "AW: {{ run.subject }}",
        "body": "Guten Tag {{ customer.name }},\n\nwir haben Ihre Anfrage erhalten.\n",
    },
}


@pytest.fixture
def inbox(settings: Any) -> Iterator[Inbox]:
    with smtp_server() as server:
        send_through(settings, server)
        settings.DEFAULT_FROM_EMAIL = "Service <service@shop.example>"
        yield server


@pytest.fixture
def mail_pipeline(policy: None) -> Pipeline:
    roles_ensure()
    customers_load(path=MAIL / "customers.csv")
    channel: IntakeChannel = channel_get_or_create(name="email")
    # The reference business's follow-up becomes a reply to the sender.
    activate_effects({"create_follow_up": email_reply_effect(TEMPLATES)})
    return Pipeline(channel)


def take_in(pipeline: Pipeline, name: str) -> Run:
    with pipeline.capture():
        call_command("intake_mail", str(MAIL / name), stdout=io.StringIO())
    pipeline.drain()
    return Run.objects.get(intake__source=f"file:{MAIL / name}")


def test_the_reply_reaches_the_sender_once_in_the_thread(
    mail_pipeline: Pipeline, inbox: Inbox
) -> None:
    run = take_in(mail_pipeline, ENGLISH)
    original = parse_message((MAIL / ENGLISH).read_bytes())

    assert (run.state, run.effect_name) == (State.COMPLETED, "create_follow_up")
    (received,) = inbox.received
    effect = Effect.objects.get(run=run)
    message = received.message
    assert received.recipients == [original.sender]
    assert message["Subject"] == f"Re: {original.subject}"
    assert message["In-Reply-To"] == f"<{original.message_id}>"
    assert message["References"].split()[-1] == f"<{original.message_id}>"
    assert message["Message-ID"] == f"<{effect.idempotency_key[:40]}@shop.example>"
    assert f"we have your request {run.event_id}" in message.get_content()
    assert effect.response_ref == message["Message-ID"]


def test_the_reply_is_written_in_the_language_of_the_request(
    mail_pipeline: Pipeline, inbox: Inbox
) -> None:
    run = take_in(mail_pipeline, GERMAN)

    assert run.enrichment["language"] == "de"
    (received,) = inbox.received
    assert received.message["Subject"].startswith("AW: ")
    assert "wir haben Ihre Anfrage erhalten" in received.message.get_content()


def test_a_refusal_for_now_is_sent_again_later_as_the_same_message(
    mail_pipeline: Pipeline, inbox: Inbox
) -> None:
    inbox.answers.append("451 4.3.0 try again later")
    run = take_in(mail_pipeline, ENGLISH)
    effect = Effect.objects.get(run=run)
    assert (effect.status, inbox.received) == (EffectStatus.RETRY_WAIT, [])

    effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)
    effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)  # a duplicate message

    effect.refresh_from_db()
    (received,) = inbox.received
    assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 2)
    assert received.message["Message-ID"] == f"<{effect.idempotency_key[:40]}@shop.example>"
    assert Run.objects.get(pk=run.pk).state == State.COMPLETED


def test_a_refusal_for_good_fails_the_run_and_sends_nothing(
    mail_pipeline: Pipeline, inbox: Inbox
) -> None:
    inbox.answers.append("550 5.1.1 no such mailbox")
    run = take_in(mail_pipeline, ENGLISH)

    assert (run.state, Effect.objects.get(run=run).status) == (
        State.FAILED,
        EffectStatus.REJECTED,
    )
    assert inbox.received == []


def test_the_run_page_shows_the_reply_that_was_sent(
    mail_pipeline: Pipeline, inbox: Inbox, ops_lead: Any
) -> None:
    run = take_in(mail_pipeline, ENGLISH)
    client = Client()
    client.force_login(ops_lead)

    page = client.get(reverse("runs:run", args=[run.pk])).content.decode()

    sent = inbox.received[0].message
    assert "What was sent" in page
    assert f"Re: {parse_message((MAIL / ENGLISH).read_bytes()).subject}" in page
    assert sent["Message-ID"].strip("<>") in page


# A login in the clear is only ever on 127.0.0.1 here; aiosmtpd warns of it all the same.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")
def test_the_reply_is_sent_with_the_login_of_the_settings(
    mail_pipeline: Pipeline, settings: Any
) -> None:
    with smtp_server(login=("gatehouse", "pw-smtp")) as inbox:
        send_through(settings, inbox)
        settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "gatehouse", "wrong"
        run = take_in(mail_pipeline, ENGLISH)
        effect = Effect.objects.get(run=run)
        # A refused login sends nothing and is tried again, like a server that is down.
        assert (effect.status, inbox.received) == (EffectStatus.RETRY_WAIT, [])
        assert {a.error_class for a in effect.attempt_rows.all()} == {"SMTPAuthenticationError"}

        settings.EMAIL_HOST_PASSWORD = "pw-smtp"
        assert effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at) == "delivered"

    (received,) = inbox.received
    assert received.message["Subject"].startswith("Re: ")
