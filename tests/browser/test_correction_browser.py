"""The correction form in a real browser: an ops lead supplies what the reader missed.

A venue's hall booking (tests/data/venue-hire-1.yaml) was read without its event date, which
the booking's effect needs: the run was held, and its correction form had no input for the
date. Now the lead picks the date, saves, and the run goes on to its effect.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from automation.models import Outcome, RecoveryAction, Run, State, Task
from tests.browser.conftest import (
    PLAYWRIGHT_MISSING,
    Person,
    choose_in_correction,
    log_in,
    screenshot,
)
from tests.catalogues import activate_venue_hire
from tests.conftest import Pipeline, make_event

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect


@pytest.fixture
def ops_lead(make_person: Callable[..., Person]) -> Person:
    return make_person("olga", "ops-leads")


@pytest.fixture
def booking_without_a_date(pipeline: Pipeline, roles: None) -> Run:
    activate_venue_hire()
    event = make_event(
        event_id="evt-hall-1",
        request_type="booking",
        requested_action="reserve_hall",
        subject="The small hall for our choir",
        body="We would like to hire the small hall for our winter concert.",
    )
    reading = {
        "category": "booking",
        "recommended_route": "bookings",
        "requested_effect": "reserve_hall",
        "reason_code": "booking_request",
        "confidence": 0.9,
        "fields": {},
    }
    run = pipeline.run(pipeline.submit(event, [{"type": "decision", "value": reading}]))
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EXTRACTION_INVALID)
    return run


def test_ops_lead_adds_a_missing_date_and_the_run_goes_on(
    page: Page, ops_lead: Person, booking_without_a_date: Run
) -> None:
    run = booking_without_a_date
    log_in(page, ops_lead, f"/runs/{run.pk}/correct")

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/correct$"))
    date = page.get_by_label("Event date")
    expect(date).to_have_attribute("type", "date")
    expect(date).to_have_value("")
    expect(page.get_by_test_id("error-field_event_date")).to_contain_text(
        "is needed for “Reserve the hall”"
    )
    screenshot(page, "correct-missing-date")

    # Another type brings its fields and its effect at once (the page's script); the booking
    # again brings the booking's.
    choose_in_correction(page, "Request type", label="Cancellation")
    expect(page.get_by_label("Booking reference")).to_be_visible()
    expect(page.get_by_label("Effect")).to_have_value("log_cancellation")
    expect(page.get_by_label("Event date")).to_have_count(0)
    choose_in_correction(page, "Request type", label="Hall booking")
    expect(page.get_by_label("Effect")).to_have_value("reserve_hall")
    expect(page.get_by_label("Event date")).to_be_visible()

    page.get_by_label("Event date").fill("2026-12-03")
    page.get_by_label("Deposit paid", exact=True).fill("250")
    page.get_by_label("Deposit paid: currency").select_option("EUR")
    page.get_by_label("Reason", exact=True).fill("The concert is on 3 December, as they wrote.")
    # Enter in a one-line input saves, as the form's main button would: it does not only
    # show the fields again.
    page.get_by_label("Deposit paid", exact=True).press("Enter")

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.get_by_role("status")).to_contain_text("policy decides again")
    expect(page.get_by_test_id("run-state")).to_have_text("Done")
    done = Run.objects.get(pk=run.pk)
    assert (done.state, done.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    fields = {name: field["value"] for name, field in done.classification["fields"].items()}
    assert fields == {"event_date": "2026-12-03", "deposit": "250.00 EUR"}
    params = Task.objects.get(run=run).payload["params"]
    assert params["event_date"] == "2026-12-03"
    assert RecoveryAction.objects.get(run=run, action="correct").actor == ops_lead.user
