"""Teams in a real browser: an administrator makes the team "claims-desk" with the approver
role, adds a person and puts her in it; the business routes a vet bill to the team, and she
approves it."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from approvals.models import ApprovalRequest, ApprovalStatus
from console.views.approvals import RESULT_MESSAGES
from tests.accounts.test_teams import activate_pet_insurer, vet_bill
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.conftest import Pipeline

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

PASSWORD = "correct-horse-pia-7"


def test_an_administrator_makes_a_team_with_the_approver_role_and_its_person_approves(
    new_context: Callable[..., BrowserContext],
    page: Page,
    make_person: Callable[..., Person],
    pipeline: Pipeline,
) -> None:
    ada = make_person("ada", "administrators")

    log_in(page, ada, "/teams/new")
    form = page.get_by_test_id("team-form")
    form.get_by_label("Name").fill("claims-desk")
    form.get_by_label("What the team does").fill("Pays the vet bills of insured pets.")
    form.get_by_role("checkbox", name=re.compile(r"^Approver ")).check()
    form.get_by_role("button", name="Make the team").click()
    expect(page.get_by_role("status")).to_have_text("Team claims-desk made. Add its people here.")
    expect(page.get_by_test_id("team-roles")).to_have_text("Roles: Approver")

    page.get_by_role("link", name="Add a new person first").click()
    person = page.get_by_test_id("person-form")
    person.get_by_label("Username").fill("pia")
    person.get_by_label("First name").fill("Pia")
    person.get_by_label("E-mail address").fill("pia@pets.example")
    person.get_by_label("Password").fill(PASSWORD)
    person.get_by_role("button", name="Add the person").click()
    expect(page.get_by_role("status")).to_have_text("pia added. Put them in a team.")

    page.goto("/teams/claims-desk/")
    members = page.get_by_test_id("member-form")
    members.get_by_label("Add a person (their username)").fill("pia")
    members.get_by_role("button", name="Add to the team").click()
    expect(page.get_by_role("status")).to_have_text("pia is now in claims-desk.")
    expect(page.get_by_test_id("members")).to_contain_text("pia")
    screenshot(page, "team-made")

    activate_pet_insurer()
    request = vet_bill(pipeline, "evt-vet-browser")

    other = new_context().new_page()
    log_in(other, Person(User.objects.get(username="pia"), PASSWORD))
    other.goto(f"/approvals/{request.pk}/")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.get_by_role("status")).to_have_text(RESULT_MESSAGES["approved"])
    assert ApprovalRequest.objects.get(pk=request.pk).status == ApprovalStatus.APPROVED
