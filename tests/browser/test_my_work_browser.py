"""My work: a lead gives a request to an approver, who finds it under My work and decides."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from console.views.approvals import RESULT_MESSAGES
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect


def test_my_work_a_lead_assigns_a_request_and_the_assignee_finds_it_and_decides(
    new_context: Callable[..., BrowserContext],
    page: Page,
    make_person: Callable[..., Person],
    submit_security_event: Callable[[str], ApprovalRequest],
) -> None:
    ana = make_person("ana", "security-approvers")
    make_person("bruno", "security-approvers")
    lead = make_person("olga", "ops-leads")
    request = submit_security_event("evt-assign-1")

    log_in(page, lead, f"/approvals/{request.pk}/")
    holder = page.get_by_test_id("holder")
    expect(holder).to_contain_text("Nobody has taken this request up yet.")
    holder.get_by_label("Give it to").select_option(label="ana")
    holder.get_by_role("button", name="Give").click()
    expect(page.get_by_text("Given to ana, who is told.")).to_be_visible()
    expect(page.get_by_test_id("holder")).to_contain_text("ana has this request")

    other = new_context().new_page()
    log_in(other, ana, "/me/work/")
    mine = other.get_by_test_id("my-approvals").locator("tbody tr", has_text="evt-assign-1")
    expect(mine).to_contain_text("given to you")
    screenshot(other, "my-work")
    mine.get_by_role("link").click()
    expect(other).to_have_url(re.compile(rf"/approvals/{request.pk}/$"))
    expect(other.get_by_test_id("holder")).to_contain_text("You have this request")
    other.get_by_role("button", name="Approve").click()
    expect(other.get_by_role("status")).to_have_text(RESULT_MESSAGES["approved"])
    request.refresh_from_db()
    assert request.status == ApprovalStatus.APPROVED

    other.goto("/me/work/")
    expect(other.get_by_test_id("my-approvals")).to_contain_text("No request waits for you.")
    other.goto("/me/decided/")
    expect(other.get_by_test_id("decided")).to_contain_text(f"#{request.pk} · evt-assign-1")
