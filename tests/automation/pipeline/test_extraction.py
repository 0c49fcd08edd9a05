"""Extracted fields that cannot be what their names say go to the correction queue."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User

from accounts.roles import roles_ensure
from automation.extraction import extraction_problems, parse_amount, parse_date
from automation.models import Outcome, State
from automation.recovery.services import CorrectionInvalid, run_correct
from tests.conftest import Pipeline, decision_for, make_event


@pytest.mark.parametrize(
    ("text", "amount", "currency"),
    [
        ("1250", Decimal("1250"), None),
        ("1,250.00 EUR", Decimal("1250.00"), "EUR"),
        ("1250,50 eur", Decimal("1250.50"), "EUR"),
        ("12 500.75 CHF", Decimal("12500.75"), "CHF"),
        ("1.250,00 EUR", Decimal("1250.00"), "EUR"),
        ("12 400,00 SEK", Decimal("12400.00"), "SEK"),
        ("1.250.000", Decimal("1250000"), None),
        ("2.340,00 €", Decimal("2340.00"), "EUR"),
        ("GBP 2,340", Decimal("2340.00"), "GBP"),
        ("€ 1.250", Decimal("1250.00"), "EUR"),  # a euro has two decimals, not three
        ("US$1,250.50", Decimal("1250.50"), "USD"),
        ("CHF 1'250.50", Decimal("1250.50"), "CHF"),
        ("£ 640", Decimal("640.00"), "GBP"),
    ],
)
def test_amounts_in_common_formats_are_read(
    text: str, amount: Decimal, currency: str | None
) -> None:
    assert parse_amount(text) == (amount, currency)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.250.00", "two decimal separators"),
        ("1.250,00.00", "two decimal separators"),
        ("1,250.00,50", "two decimal separators"),
        ("1,25,0.00", "mixes decimal separators"),
        ("twelve", "not an amount"),
        ("1,250", "could be 1250 or 1.250"),  # no language to say which
        ("$1,250.50", "stands for AUD, CAD"),  # which dollar?
        ("€ 12 EUR GBP", "not an amount"),
    ],
)
def test_ambiguous_amounts_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_amount(text)


def test_dates_in_iso_or_words_are_read_and_others_refused() -> None:
    assert parse_date("2026-11-29") == date(2026, 11, 29)
    assert parse_date("3 November 2026") == date(2026, 11, 3)
    with pytest.raises(ValueError, match="not a date"):
        parse_date("31/02/2026")


def test_each_bad_field_is_named() -> None:
    problems = extraction_problems(
        {
            "amount": {"value": "100 XYZ"},
            "currency": {"value": "EURO"},
            "due_date": {"value": "soon"},
            "customer_name": {"value": "Dana Ortiz"},
        }
    )
    assert [p.field for p in problems] == ["fields.amount", "fields.currency", "fields.due_date"]
    assert "ISO 4217" in problems[0].message


def test_an_unreadable_amount_holds_the_run_in_the_correction_queue(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-amt")
    reading = decision_for(event)
    reading["value"]["fields"] = {"amount": {"value": "1.250.00 EUR", "confidence": 0.8}}

    run = pipeline.run(pipeline.submit(event, [reading]))

    assert (run.state, run.outcome, run.queue) == (
        State.NEEDS_REVIEW,
        Outcome.EXTRACTION_INVALID,
        Outcome.EXTRACTION_INVALID,
    )
    assert run.failure_field == "fields.amount"
    assert "two decimal separators" in run.failure_detail
    assert not run.effects.exists()


def test_a_correction_is_held_to_the_same_checks(pipeline: Pipeline) -> None:
    roles_ensure()
    lead = User.objects.create_user("lee")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    event = make_event(event_id="evt-fix")
    reading = decision_for(event)
    reading["value"]["fields"] = {"amount": {"value": "1.250.00 EUR", "confidence": 0.8}}
    run = pipeline.run(pipeline.submit(event, [reading]))
    corrected = {
        **reading["value"],
        "fields": {"amount": {"value": "1.250,00.00", "confidence": 1.0}},
    }

    with pytest.raises(CorrectionInvalid) as refused:
        run_correct(run_id=run.pk, user=lead, corrected=corrected, reason="typo")
    assert [p.field for p in refused.value.problems] == ["fields.amount"]

    corrected["fields"]["amount"]["value"] = "1,250.00 EUR"
    with pipeline.capture():
        run_correct(run_id=run.pk, user=lead, corrected=corrected, reason="typo")
    pipeline.drain()
    assert pipeline.run(pipeline.submit(event)).state == State.COMPLETED


# --- six languages, as real mail writes them ---------------------------------------------------

LETTERS = [
    # (language, a sentence of a real-looking claim, the amount in it, the date in it)
    (
        "en",
        "The repair came to GBP 2,340 and the accident happened on 29 November 2026.",
        "GBP 2,340",
        "29 November 2026",
    ),
    (
        "de",
        "Der Schaden vom 3. Dezember 2026 beläuft sich laut Kostenvoranschlag auf 2.340,00 €.",
        "2.340,00 €",
        "3. Dezember 2026",
    ),
    (
        "fr",
        "Le sinistre du 1er décembre 2026 est estimé à 12 400,00 SEK par le garage.",
        "12 400,00 SEK",
        "1er décembre 2026",
    ),
    (
        "es",
        "El siniestro ocurrió el 29 de noviembre de 2026; la factura del taller es de € 1.250.",
        "€ 1.250",
        "29 de noviembre de 2026",
    ),
    (
        "nl",
        "De schade van 3 december 2026 bedraagt volgens de offerte 640,00 EUR.",
        "640,00 EUR",
        "3 december 2026",
    ),
    (
        "it",
        "Il danno del 3 dicembre 2026 ammonta a CHF 1'250.50 secondo il preventivo.",
        "CHF 1'250.50",
        "3 dicembre 2026",
    ),
]
TYPED = {
    "en": ((Decimal("2340.00"), "GBP"), date(2026, 11, 29)),
    "de": ((Decimal("2340.00"), "EUR"), date(2026, 12, 3)),
    "fr": ((Decimal("12400.00"), "SEK"), date(2026, 12, 1)),
    "es": ((Decimal("1250.00"), "EUR"), date(2026, 11, 29)),
    "nl": ((Decimal("640.00"), "EUR"), date(2026, 12, 3)),
    "it": ((Decimal("1250.50"), "CHF"), date(2026, 12, 3)),
}


@pytest.mark.parametrize(("language", "sentence", "amount", "written"), LETTERS)
def test_amounts_and_dates_of_six_languages_are_read_into_typed_values(
    language: str, sentence: str, amount: str, written: str
) -> None:
    assert amount in sentence and written in sentence  # the words as the mail has them
    (number, currency), day = TYPED[language]

    read_amount = parse_amount(amount, language=language)
    read_date = parse_date(written, language=language)

    assert read_amount == (number, currency)
    assert isinstance(read_amount[0], Decimal)
    assert type(read_date) is date and read_date == day


@pytest.mark.parametrize(
    ("text", "language", "day"),
    [
        ("30.11.2026", "de", date(2026, 11, 30)),
        ("30.11.2026", None, date(2026, 11, 30)),  # 30 can only be the day
        ("03/04/2026", "fr", date(2026, 4, 3)),
        ("03-04-2026", "nl", date(2026, 4, 3)),
        ("03/04/2026", "it", date(2026, 4, 3)),
        ("3/4/2026", "es", date(2026, 4, 3)),
        ("04/13/2026", "en", date(2026, 4, 13)),  # 13 can only be the day
    ],
)
def test_numeric_dates_are_read_in_the_order_the_language_writes(
    text: str, language: str | None, day: date
) -> None:
    assert parse_date(text, language=language) == day


@pytest.mark.parametrize("language", [None, "en"])
def test_a_numeric_date_whose_day_could_be_its_month_is_for_a_person(
    language: str | None,
) -> None:
    # English is written 04/03 for the 3rd of April in one country and the 4th of March in
    # another: nothing here says which.
    with pytest.raises(ValueError, match="could be 4 March or 3 April 2026"):
        parse_date("04/03/2026", language=language)


def test_the_language_decides_what_a_comma_in_an_amount_means() -> None:
    assert parse_amount("1,250", language="en") == (Decimal("1250"), None)
    assert str(parse_amount("1,250", language="de")[0]) == "1.250"
    with pytest.raises(ValueError, match="could be"):
        parse_amount("1,250")
    # A euro has two decimals: 1.250 € is not one euro and a quarter cent, in any language.
    assert parse_amount("1.250 €") == (Decimal("1250.00"), "EUR")


def test_a_dollar_is_read_only_as_the_currency_the_context_names() -> None:
    assert parse_amount("$1,250.50", currency="USD") == (Decimal("1250.50"), "USD")
    assert parse_amount("$1,250.50", currency="CAD") == (Decimal("1250.50"), "CAD")
    with pytest.raises(ValueError, match="stands for"):
        parse_amount("$1,250.50", currency="EUR")


@pytest.mark.parametrize("text", ["in three days", "tomorrow 2026", "3 days ago", "1. 2026"])
def test_relative_or_partial_dates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a date"):
        parse_date(text, language="en")


def test_the_checks_read_fields_in_the_messages_language() -> None:
    fields = {"amount": {"value": "1.250 €"}, "loss_date": {"value": "03/04/2026"}}
    assert extraction_problems(fields, language="de") == []
    problems = extraction_problems(fields, language="en")
    assert [p.field for p in problems] == ["fields.loss_date"]
    assert "could be" in problems[0].message
