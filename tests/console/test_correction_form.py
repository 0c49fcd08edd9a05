"""The correction form supplies what the reader missed: every field of the chosen type and
every parameter of the chosen effect, found or not, each with an input of its type and its
problem beside it; another type or effect brings its own fields; nothing is saved while a
problem remains.

Its inputs showed only the fields the reader had found: a run held because the event date was
needed had no input for it, and free text no local reader reads could never be entered. The
business is one of its own (tests/data/venue-hire-1.yaml).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from automation.models import Checkpoint, Outcome, RecoveryAction, Run, State, Task
from automation.schemas import FieldProblem
from console.forms.correction import correction_form
from tests.catalogues import activate_venue_hire
from tests.conftest import Pipeline, _user, make_event

ROUTES = {"booking": "bookings", "cancellation": "bookings", "complaint": "front_of_house"}
EFFECTS = {
    "booking": "reserve_hall",
    "cancellation": "log_cancellation",
    "complaint": "log_complaint",
}


def venue_reading(category: str, **fields: str) -> dict[str, Any]:
    value = {
        "category": category,
        "recommended_route": ROUTES[category],
        "requested_effect": EFFECTS[category],
        "reason_code": f"{category}_request",
        "confidence": 0.9,
        "fields": {name: {"value": text, "confidence": 0.8} for name, text in fields.items()},
    }
    return {"type": "decision", "value": value}


def held(pipeline: Pipeline, category: str, event_id: str, **fields: str) -> Run:
    """A request of the venue read without what its effect needs: held for a person."""
    event = make_event(
        event_id=event_id,
        request_type=category,
        requested_action=EFFECTS[category],
        subject="The small hall for our choir",
        body="We would like to hire the small hall for our winter concert.",
    )
    run = pipeline.run(pipeline.submit(event, [venue_reading(category, **fields)]))
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EXTRACTION_INVALID)
    return run


@pytest.fixture
def venue(pipeline: Pipeline) -> Pipeline:
    activate_venue_hire()
    return pipeline


@pytest.fixture
def lead(db: None) -> Client:
    client = Client()
    client.force_login(_user("lena", "ops-leads"))
    return client


def booking_form(**changes: str) -> dict[str, str]:
    return {
        "category": "booking",
        "recommended_route": "bookings",
        "requested_effect": "reserve_hall",
        "reason_code": "booking_request",
        "reason": "Read the request: the concert is on 3 December.",
        **changes,
    }


def input_tag(page: str, name: str) -> str:
    """The opening tag of the input (or text area) called `name`."""
    found = re.search(rf'<(?:input|textarea)[^>]*\bname="{name}"[^>]*>', page)
    assert found is not None, f"no input {name}"
    return found.group(0)


def beside(page: str, name: str) -> str:
    """The text of the field block of input `name`: its label, input and messages."""
    found = re.search(
        rf'<div class="field[^"]*" data-testid="input-{name}">(.*?)</div>', page, re.S
    )
    assert found is not None, f"no field block for {name}"
    return re.sub(r"\s+", " ", found.group(1))


def nothing_saved(run: Run) -> None:
    now = Run.objects.get(pk=run.pk)
    assert (now.state, now.outcome) == (State.NEEDS_REVIEW, Outcome.EXTRACTION_INVALID)
    assert now.classification == run.classification
    assert not RecoveryAction.objects.filter(run=run).exists()
    assert not Checkpoint.objects.filter(run=run, source="correction").exists()


def test_a_run_held_for_a_missing_date_has_an_empty_date_input_with_its_problem(
    venue: Pipeline, lead: Client
) -> None:
    run = held(venue, "booking", "evt-no-date", contact_email="choir@example.org")

    response = lead.get(reverse("runs:correct", args=[run.pk]))

    page = response.content.decode()
    date = input_tag(page, "field_event_date")
    assert 'type="date"' in date
    assert "value=" not in date
    assert "is needed for “Reserve the hall” and was not found" in beside(page, "field_event_date")
    # Every field of the type, found or not, with an input of its type.
    assert 'type="number"' in input_tag(page, "field_deposit")
    assert '<select name="field_deposit_currency"' in page
    assert 'type="email"' in input_tag(page, "field_contact_email")
    assert 'value="choir@example.org"' in input_tag(page, "field_contact_email")
    # The effect's parameters: through the event date's input, or made from the run itself.
    parameters = re.sub(r"\s+", " ", page.split('data-testid="parameters"')[1])
    assert "From the field “Event date” above." in parameters
    assert "<output>The small hall for our choir</output>" in parameters


def test_free_text_the_reader_never_reads_can_be_entered(venue: Pipeline, lead: Client) -> None:
    run = held(venue, "complaint", "evt-complaint")
    form = {
        "category": "complaint",
        "recommended_route": "front_of_house",
        "requested_effect": "log_complaint",
        "reason_code": "complaint_request",
        "field_complaint_reason": "The heating was off all evening.",
        "field_new_address": "4 Mill Lane, Oxford",
        "reason": "Read the request.",
    }
    page = lead.get(reverse("runs:correct", args=[run.pk])).content.decode()
    assert "<textarea" in input_tag(page, "field_complaint_reason")
    assert "<textarea" in input_tag(page, "field_new_address")

    with venue.capture():
        response = lead.post(reverse("runs:correct", args=[run.pk]), form)
    venue.drain()

    assert response.status_code == 302
    done = Run.objects.get(pk=run.pk)
    assert done.state == State.COMPLETED
    fields = {name: field["value"] for name, field in done.classification["fields"].items()}
    assert fields == {
        "complaint_reason": "The heating was off all evening.",
        "new_address": "4 Mill Lane, Oxford",
    }
    task = Task.objects.get(run=run)
    assert task.payload["params"] == {"complaint": "The heating was off all evening."}


def test_another_type_brings_its_fields_and_keeps_what_was_typed(
    venue: Pipeline, lead: Client
) -> None:
    run = held(venue, "booking", "evt-switch")
    url = reverse("runs:correct", args=[run.pk])

    shown = lead.post(
        url,
        booking_form(
            category="cancellation",
            requested_effect="log_cancellation",
            field_event_date="2026-12-03",
            show_fields="1",
        ),
    )

    assert shown.status_code == 200
    page = shown.content.decode()
    reference = input_tag(page, "field_booking_reference")
    assert 'pattern="VH-[0-9]{5}"' in reference
    assert "<textarea" in input_tag(page, "field_reason")
    assert 'name="field_event_date"' in page and 'type="hidden"' in input_tag(
        page, "field_event_date"
    )  # carried, so choosing the booking again brings it back
    assert '<option value="cancellation" selected>' in page
    assert "The fields of “Cancellation” and “Log the cancellation”" in page
    assert "Read the request: the concert is on 3 December." in page
    assert "error" not in beside(page, "field_booking_reference")
    nothing_saved(run)

    back = lead.post(url, booking_form(field_event_date="2026-12-03", show_fields="1"))

    date = input_tag(back.content.decode(), "field_event_date")
    assert 'type="date"' in date and 'value="2026-12-03"' in date
    nothing_saved(run)


def test_saving_with_a_problem_left_is_refused_and_saves_nothing(
    venue: Pipeline, lead: Client
) -> None:
    run = held(venue, "booking", "evt-still-missing")
    url = reverse("runs:correct", args=[run.pk])

    missing = lead.post(url, booking_form(field_deposit="250", field_deposit_currency="EUR"))
    wrong = lead.post(url, booking_form(field_event_date="next week"))
    no_currency = lead.post(url, booking_form(field_event_date="2026-12-03", field_deposit="250"))

    assert missing.status_code == wrong.status_code == no_currency.status_code == 400
    assert "error" in beside(missing.content.decode(), "field_event_date")
    assert "“next week” is not a date" in beside(wrong.content.decode(), "field_event_date")
    assert "Choose the amount&#x27;s currency." in beside(
        no_currency.content.decode(), "field_deposit"
    )
    # What was typed stays.
    assert 'value="250"' in input_tag(missing.content.decode(), "field_deposit")
    nothing_saved(run)


def test_a_date_and_an_amount_are_stored_as_the_reader_writes_them(
    venue: Pipeline, lead: Client
) -> None:
    run = held(venue, "booking", "evt-typed")
    form = booking_form(
        field_event_date="2026-12-03", field_deposit="1250", field_deposit_currency="EUR"
    )

    with venue.capture():
        response = lead.post(reverse("runs:correct", args=[run.pk]), form)
    venue.drain()

    assert response.status_code == 302
    done = Run.objects.get(pk=run.pk)
    assert done.state == State.COMPLETED
    fields = done.classification["fields"]
    assert fields["event_date"]["value"] == "2026-12-03"
    assert fields["deposit"]["value"] == "1250.00 EUR"
    assert Task.objects.get(run=run).payload["params"]["event_date"] == "2026-12-03"


def test_what_the_reader_wrote_is_shown_in_the_inputs_of_its_type(
    venue: Pipeline, lead: Client
) -> None:
    run = held(venue, "booking", "evt-words", event_date="3 December 2026", deposit="lots")

    page = lead.get(reverse("runs:correct", args=[run.pk])).content.decode()

    assert 'value="2026-12-03"' in input_tag(page, "field_event_date")
    deposit = beside(page, "field_deposit")
    assert "The reader found “lots”, which this input cannot take" in deposit
    assert "is not an amount" in deposit


def test_each_problem_shows_beside_what_it_names_and_the_rest_at_the_top(
    venue: Pipeline,
) -> None:
    """Problems of the effect's parameters (`params.<name>`) as well as the reading's."""
    run = held(venue, "booking", "evt-problems")
    data = QueryDict(mutable=True)
    data.update(booking_form(field_event_date="2026-12-03"))
    form = correction_form(run, data)
    form.is_valid()

    ok = form.judge(
        [
            FieldProblem(field="fields.event_date", message="is on a day the venue is closed"),
            FieldProblem(field="params.requested_in", message="could not be made"),
            FieldProblem(field="effects.reserve_hall", message="could not be written"),
        ]
    )

    assert not ok
    assert form.errors["field_event_date"] == ["is on a day the venue is closed"]
    rows = {row.row.name: row.messages for row in form.parameter_rows()}
    assert rows["requested_in"] == ["could not be made"]
    assert form.problems_shown_at_top() == ["Reserve the hall: could not be written"]
