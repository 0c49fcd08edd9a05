"""Typed values end to end: an effect's amount is a decimal and an ISO 4217 code, its date an
ISO date, in the payload and in what the templates write; a reply writes them in the sender's
language (Babel). The mail is real-looking mail taken in through the mail intake; the HTTP
receiver and the SMTP server are real ones on 127.0.0.1."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from pydantic import ValidationError

from accounts.roles import roles_ensure
from automation.intake.customers import customers_load
from automation.intake.services import channel_get_or_create
from automation.models import Effect, IntakeChannel, Run, State
from policy.catalogue import Catalogue, Money, reference_catalogue, render_template
from tests.catalogues import SIGNING_VARIABLE, activate_effects, email_reply_effect, http_effect
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream
from tests.mailserver import Inbox, send_through, smtp_server

MAIL = Path(__file__).resolve().parents[2] / "data" / "mail"
SECRET = "s" * 32
# A claim's amount and loss date, typed, for an effect that needs them.
PARAMETERS = {
    "amount": {"value": "{{ fields.amount }}", "type": "amount", "required": False},
    "loss_date": {"value": "{{ fields.date }}", "type": "date"},
}
CLAIM_BODY = {
    "claim": {
        "amount": "{{ params.amount.value }}",
        "currency": "{{ params.amount.currency }}",
        "loss_date": "{{ params.loss_date }}",
        "loss_date_again": "{{ params.loss_date | isodate }}",
        "note": "{{ params.amount | money(run.language) }} on {{ params.loss_date | date('en') }}",
    }
}


@pytest.fixture
def downstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[Downstream]:
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    with running_downstream(SECRET) as server:
        yield server


def test_a_claims_api_gets_a_decimal_a_currency_code_and_an_iso_date(
    pipeline: Pipeline, downstream: Downstream
) -> None:
    effect = http_effect(downstream.url, body=CLAIM_BODY)
    activate_effects({"create_follow_up": {**effect, "parameters": PARAMETERS}})
    event = make_event(subject="Motor claim", body="Please open a claim for our van.")
    fields = {
        "amount": {"value": "2.340,00 €", "confidence": 0.9, "source": "2.340,00 €"},
        "date": {"value": "3. Dezember 2026", "confidence": 0.9, "source": "3. Dezember 2026"},
    }

    run = pipeline.run(pipeline.submit(event, [decision_for(event, fields=fields)]))

    (received,) = downstream.requests
    assert received.payload == {
        "claim": {
            "amount": "2340.00",
            "currency": "EUR",
            "loss_date": "2026-12-03",
            "loss_date_again": "2026-12-03",
            "note": "€2,340.00 on December 3, 2026",
        }
    }
    stored = Effect.objects.get(run=run).payload
    assert stored["params"] == {
        "amount": {"value": "2340.00", "currency": "EUR"},
        "loss_date": "2026-12-03",
    }
    assert Run.objects.get(pk=run.pk).state == State.COMPLETED


def test_an_amount_with_no_currency_holds_the_run_with_its_field_named(
    pipeline: Pipeline, downstream: Downstream
) -> None:
    effect = http_effect(downstream.url, body=CLAIM_BODY)
    required = {**PARAMETERS, "amount": {**PARAMETERS["amount"], "required": True}}
    activate_effects({"create_follow_up": {**effect, "parameters": required}})
    event = make_event(subject="Motor claim", body="Please open a claim for our van.")
    fields = {
        "amount": {"value": "2340", "confidence": 0.9},
        "date": {"value": "2026-12-03", "confidence": 0.9},
    }

    run = pipeline.run(pipeline.submit(event, [decision_for(event, fields=fields)]))

    assert run.state == State.NEEDS_REVIEW
    assert run.failure_field == "fields.amount"
    assert "currency" in run.failure_detail
    assert downstream.requests == [] and not run.effects.exists()


# --- a reply in the sender's language ----------------------------------------------------------

REPLIES = {
    "en": {
        "subject": "Re: {{ run.subject }}",
        "body": "We have your request of {{ params.loss_date | date }} "
        "({{ params.amount | money }}).\n",
    },
    "de": {
        "subject": "AW: {{ run.subject }}",
        "body": "Ihre Anfrage vom {{ params.loss_date | date }} über "
        "{{ params.amount | money }} ist eingegangen.\n",
    },
    "fr": {
        "subject": "RE : {{ run.subject }}",
        "body": "Nous avons bien reçu votre demande pour le {{ params.loss_date | date }}.\n",
    },
}


@pytest.fixture
def inbox(settings: Any) -> Iterator[Inbox]:
    with smtp_server() as server:
        send_through(settings, server)
        settings.DEFAULT_FROM_EMAIL = "Claims <claims@insurer.example>"
        yield server


@pytest.fixture
def mail_pipeline(policy: None) -> Pipeline:
    roles_ensure()
    customers_load(path=MAIL / "customers.csv")
    channel: IntakeChannel = channel_get_or_create(name="email")
    reply = email_reply_effect(REPLIES)
    activate_effects({"create_follow_up": {**reply, "parameters": PARAMETERS}})
    return Pipeline(channel)


@pytest.mark.parametrize(
    ("name", "language", "written"),
    [
        # "We need the quote by November 15, 2026", read as its ISO date first: 2026-11-15.
        (
            "01-quote-request-northwind.eml",
            "en",
            "We have your request of November 15, 2026 (€1,250.00).",
        ),
        (
            "02-angebot-lizenzen-brightwater.eml",
            "de",
            "Ihre Anfrage vom 15. November 2026 über 1.250,00\xa0€ ist eingegangen.",
        ),
        # "à partir du 1er décembre 2026", which was not read as a date at all.
        (
            "03-demande-de-devis-atelier-lumiere.eml",
            "fr",
            "Nous avons bien reçu votre demande pour le 1 décembre 2026.",
        ),
    ],
)
def test_a_reply_writes_the_date_and_amount_in_the_senders_language(
    mail_pipeline: Pipeline, inbox: Inbox, name: str, language: str, written: str
) -> None:
    with mail_pipeline.capture():
        call_command("intake_mail", str(MAIL / name), stdout=io.StringIO())
    mail_pipeline.drain()
    run = Run.objects.get(intake__source=f"file:{MAIL / name}")

    assert run.enrichment["language"] == language
    assert run.state == State.COMPLETED, run.failure_detail
    (received,) = inbox.received
    assert written in received.message.get_content()


# --- the templates and their checks -------------------------------------------------------------


def test_the_catalogue_accepts_the_parts_of_a_typed_value_and_its_filters() -> None:
    data = reference_catalogue().model_dump(mode="json", exclude_none=True)
    data["effects"]["create_follow_up"] = {
        "label": "Open a claim",
        "description": "A claims system.",
        **http_effect("https://claims.example/api", body=CLAIM_BODY),
        "parameters": PARAMETERS,
    }
    Catalogue.model_validate(data)
    data["effects"]["create_follow_up"]["http"]["body"] = {"x": "{{ params.premium.value }}"}
    with pytest.raises(ValidationError, match="unknown parameter 'premium'"):
        Catalogue.model_validate(data)
    # A misspelt filter is refused when the catalogue is saved, not when a claim is paid.
    data["effects"]["create_follow_up"]["http"]["body"] = {"x": "{{ params.amount | mony }}"}
    with pytest.raises(ValidationError, match="the filter 'mony', which templates do not have"):
        Catalogue.model_validate(data)


@pytest.mark.parametrize(
    ("language", "money", "day"),
    [
        ("en", "£2,340.00", "December 3, 2026"),
        ("de", "2.340,00\xa0£", "3. Dezember 2026"),
        ("fr", "2\u202f340,00\xa0£GB", "3 décembre 2026"),
        ("es", "2.340,00\xa0GBP", "3 de diciembre de 2026"),
        ("nl", "£\xa02.340,00", "3 december 2026"),
        ("it", "2.340,00\xa0£", "3 dicembre 2026"),
    ],
)
def test_the_filters_write_money_and_dates_as_each_language_does(
    language: str, money: str, day: str
) -> None:
    template = "{{ a | money(l) }}|{{ d | date(l) }}|{{ a }}"
    amount = Money({"value": "2340.00", "currency": "GBP"})
    values = {"a": amount, "d": "2026-12-03", "l": language}
    assert render_template(template, values, where="test") == f"{money}|{day}|2340.00 GBP"
