"""Extracted fields that cannot be what their names say go to the correction queue."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User

from automation.extraction import extraction_problems, parse_amount, parse_date
from automation.models import Outcome, State
from automation.recovery.services import CorrectionInvalid, run_correct
from automation.roles import roles_ensure
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
        ("1,250", Decimal("1250"), None),
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
