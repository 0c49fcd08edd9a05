"""The business form in a real browser, on a phone's screen: an ops lead adds a request type,
the route it goes to and the effect that opens a ticket for it, and reads the draft's diff."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group

from policy.models import PolicyVersion
from policy.services import policy_ensure_defaults
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.console.test_business_form import (
    TICKET_PARAMETERS,
    TICKET_SETTINGS,
    WARRANTY_CUES,
    WARRANTY_FIELDS,
)

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Locator, Page, expect

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def ops_lead(make_person: Callable[..., Person]) -> Person:
    policy_ensure_defaults()
    return make_person("olga", "ops-leads")


def fits_the_screen(page: Page) -> bool:
    """No form part is wider than the screen: nothing needs scrolling sideways."""
    return bool(
        page.evaluate(
            "() => [...document.querySelectorAll('form.policy-form fieldset, .field')]"
            ".every(e => e.getBoundingClientRect().right <= window.innerWidth + 1)"
        )
    )


def fill_the_warranty_desk(
    page: Page, fields: str, cues: str, settings: str, parameters: str
) -> None:
    """Type the warranty desk into the business form's add blocks: the route, the request
    type (its usual effect the new one) and the http effect, approved by finance."""
    page.get_by_label("Version name").fill("warranty-1")
    route = page.get_by_test_id("add-route")
    route.get_by_label("Name").fill("warranty_desk")
    route.get_by_label("Label").fill("Warranty desk")
    route.get_by_label("Owned by").select_option("ops-leads")
    kind = page.get_by_test_id("add-type")
    kind.get_by_label("Name").fill("warranty_claim")
    kind.get_by_label("Label").fill("Warranty claim")
    kind.get_by_label("Description").fill("A product that broke within its warranty.")
    kind.get_by_label("Sent to").select_option(label="The new route, added below")
    kind.get_by_label("Usual effect").select_option(label="The new effect, added below")
    kind.get_by_label("Fields").fill(fields)
    kind.get_by_label("Cue words").fill(cues)
    effect = page.get_by_test_id("add-effect")
    effect.get_by_label("Name").fill("open_warranty_ticket")
    effect.get_by_label("Label").fill("Open a warranty ticket")
    effect.get_by_label("Description").fill("A ticket in the warranty desk's helpdesk.")
    effect.get_by_label("How it is done").select_option("http")
    effect.get_by_label("Adapter settings").fill(settings)
    effect.get_by_label("Parameters").fill(parameters)
    effect.get_by_label("Policy allows it").check()
    effect.get_by_label("Approved by").select_option("finance-approvers")


def test_an_ops_lead_adds_a_warranty_desk_from_a_phone(
    new_context: Callable[..., BrowserContext], ops_lead: Person
) -> None:
    page = new_context(viewport=PHONE).new_page()
    log_in(page, ops_lead, "/policy/")
    page.get_by_test_id("edit-business").click()
    expect(page).to_have_url(re.compile(r"/policy/business$"))
    assert fits_the_screen(page)

    fill_the_warranty_desk(page, WARRANTY_FIELDS, WARRANTY_CUES, TICKET_SETTINGS, TICKET_PARAMETERS)
    screenshot(page, "business-form-phone")
    page.get_by_role("button", name="Save the business as a draft").click()

    expect(page).to_have_url(re.compile(r"/policy/warranty-1/$"))
    diff = page.get_by_test_id("diff")
    expect(diff.locator("span.add", has_text="warranty_claim: warranty_desk")).to_have_count(1)
    expect(diff.locator("span.add", has_text="open_warranty_ticket")).not_to_have_count(0)
    document = PolicyVersion.objects.get(name="warranty-1").document
    assert document["approvals"]["open_warranty_ticket"]["group"] == "finance-approvers"


def test_a_refusal_is_shown_at_its_field_and_the_form_keeps_what_was_typed(
    new_context: Callable[..., BrowserContext], ops_lead: Person
) -> None:
    page = new_context(viewport=PHONE).new_page()
    log_in(page, ops_lead, "/policy/business")
    kind = page.get_by_test_id("add-type")
    kind.get_by_label("Name").fill("warranty_claim")
    kind.get_by_label("Label").fill("Warranty claim")
    page.get_by_role("button", name="Save the business as a draft").click()

    expect(page.get_by_test_id("form-problems")).to_contain_text("New request type > Sent to")
    kind = page.get_by_test_id("add-type")
    expect(kind.get_by_test_id("field-error")).to_have_text(
        "Choose where requests of this type go: with no route they would go nowhere."
    )
    expect(kind.get_by_label("Name")).to_have_value("warranty_claim")
    assert fits_the_screen(page)
    screenshot(page, "business-form-refused-phone")


# --- a business from nothing, with the add buttons ------------------------------------------


@pytest.fixture
def first_lead(make_person: Callable[..., Person]) -> Person:
    """An ops lead on an install with no policy version; the agency's two teams exist."""
    for team in ("maintenance-team", "lettings-team"):
        Group.objects.get_or_create(name=team)
    return make_person("lena", "ops-leads")


def fill_block(block: Locator, **values: str) -> None:
    """Type into a block's inputs by their labels (Sent_to for "Sent to")."""
    for label, value in values.items():
        field = block.get_by_label(label.replace("_", " "), exact=True)
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(label=value)
        else:
            field.fill(value)


def build_a_letting_agency(page: Page) -> None:
    """Two routes, two request types and a record effect, each one more block added with
    its button."""
    page.get_by_label("Version name").fill("lettings-1")
    fill_block(page.get_by_test_id("add-route"), Name="maintenance", Label="Maintenance")
    page.get_by_test_id("add-route").get_by_label("Owned by").select_option("maintenance-team")
    page.get_by_test_id("add-another-route").click()
    second = page.get_by_test_id("add-route-2")
    expect(second.get_by_label("Name")).to_be_visible()
    fill_block(second, Name="lettings", Label="Lettings")
    second.get_by_label("Owned by").select_option("lettings-team")
    fill_block(page.get_by_test_id("add-effect"), Name="log_the_request", Label="Log it")
    page.get_by_test_id("add-effect").get_by_label("How it is done").select_option("record")
    page.get_by_test_id("add-effect").get_by_label("Policy allows it").check()
    fill_block(
        page.get_by_test_id("add-type"),
        Name="repair_request",
        Label="Repair request",
        Sent_to="Maintenance (the new route, added below)",
    )
    page.get_by_test_id("add-type").get_by_label("Cue words").fill("en: broken, leak")
    page.get_by_test_id("add-another-type").click()
    kind = page.get_by_test_id("add-type-2")
    expect(kind.get_by_label("Name")).to_be_visible()
    fill_block(
        kind,
        Name="rent_question",
        Label="Rent question",
        Sent_to="Lettings (the new route, added below)",
    )
    kind.get_by_label("Cue words").fill("en: rent, deposit")


def saved_agency(page: Page) -> dict[str, Any]:
    page.get_by_test_id("save").click()
    expect(page).to_have_url(re.compile(r"/policy/lettings-1/$"))
    version = PolicyVersion.objects.get(name="lettings-1")
    assert version.is_active is False
    return version.document


def test_an_ops_lead_builds_a_business_from_nothing_with_the_add_buttons(
    new_context: Callable[..., BrowserContext], first_lead: Person
) -> None:
    page = new_context().new_page()
    log_in(page, first_lead, "/policy/business")
    page.get_by_role("link", name="Start from nothing").click()
    expect(page.locator("form[data-business][data-ready]")).to_have_count(1)
    page.evaluate("() => { window.sameDocument = true; }")

    build_a_letting_agency(page)
    # The script added the blocks in place (no round trip): what was typed is still there.
    assert page.evaluate("() => window.sameDocument === true")
    expect(page.get_by_test_id("add-route").get_by_label("Name")).to_have_value("maintenance")
    screenshot(page, "business-from-nothing")
    document = saved_agency(page)

    assert document["routes"] == {"repair_request": "maintenance", "rent_question": "lettings"}
    assert document["catalogue"]["routes"]["lettings"]["group"] == "lettings-team"
    assert document["catalogue"]["request_types"]["rent_question"]["cues"] == {
        "en": ["rent", "deposit"]
    }
    assert document["allowed_effects"] == ["log_the_request"]


def test_without_script_the_add_buttons_show_the_form_again_with_what_was_typed(
    new_context: Callable[..., BrowserContext], first_lead: Person
) -> None:
    page = new_context(java_script_enabled=False).new_page()
    log_in(page, first_lead, "/policy/business?start=nothing")

    build_a_letting_agency(page)
    expect(page.get_by_test_id("add-route").get_by_label("Name")).to_have_value("maintenance")
    expect(page.get_by_test_id("add-type").get_by_label("Cue words")).to_have_value(
        "en: broken, leak"
    )
    document = saved_agency(page)

    assert set(document["catalogue"]["request_types"]) == {"repair_request", "rent_question"}
    assert document["routes"]["rent_question"] == "lettings"
