"""Typed values on the console: an amount with its currency and a date, written in the
reader's language (English) where the evidence and run pages list parameters and fields."""

from __future__ import annotations

import pytest

from console.templatetags.lists import payload_rows
from console.templatetags.values import field_shown


@pytest.mark.django_db
def test_a_typed_parameter_is_shown_formatted_beside_its_stored_value() -> None:
    payload = {
        "effect": "pay_claim",
        "params": {
            "amount": {"value": "12400.00", "currency": "SEK"},
            "loss_date": "2026-12-03",
            "claim": "CLM-2026-0042",
        },
    }
    rows = {label: (shown, stored) for label, shown, stored in payload_rows(payload)}

    assert rows["Parameter amount"] == ("SEK12,400.00", "12400.00 SEK")
    assert rows["Parameter loss date"] == ("December 3, 2026", "2026-12-03")
    assert rows["Parameter claim"] == ("CLM-2026-0042", "CLM-2026-0042")


def test_an_extracted_amount_and_date_are_shown_in_english() -> None:
    assert field_shown({"value": "2340.00 GBP"}, "amount") == "£2,340.00"
    assert field_shown({"value": "2026-12-03"}, "loss_date") == "December 3, 2026"
    # What reads two ways is shown as the reading has it, for a person to decide.
    assert field_shown({"value": "$480.00"}, "amount") == "$480.00"
    assert field_shown({"value": "03/04/2026"}, "date") == "03/04/2026"
