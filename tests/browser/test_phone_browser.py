"""Phone: an approver finds a request in the inbox, reads its evidence and decides it at a
phone's width (390 by 844), without the page scrolling sideways."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from console.views.approvals import RESULT_MESSAGES
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}


def sideways(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


def test_phone_an_approver_decides_a_request_at_390_by_844(
    new_context: Callable[..., BrowserContext],
    approver: Person,
    waiting: ApprovalRequest,
) -> None:
    phone: Page = new_context(**PHONE).new_page()
    log_in(phone, approver)

    expect(phone).to_have_url(re.compile(r"/approvals/$"))
    row = phone.get_by_test_id("inbox").locator("tbody tr", has_text="evt-sec-1")
    expect(row).to_be_visible()
    assert sideways(phone) <= 0, "the inbox scrolls sideways on a phone"
    screenshot(phone, "phone-inbox")

    row.get_by_role("link").first.click()
    expect(phone).to_have_url(re.compile(rf"/approvals/{waiting.pk}/$"))
    approve = phone.get_by_role("button", name="Approve", exact=True)
    approve.scroll_into_view_if_needed()
    expect(approve).to_be_in_viewport()
    assert sideways(phone) <= 0, "the evidence page scrolls sideways on a phone"
    screenshot(phone, "phone-evidence")

    approve.tap()
    expect(phone.get_by_role("status")).to_have_text(RESULT_MESSAGES["approved"])
    waiting.refresh_from_db()
    assert waiting.status == ApprovalStatus.APPROVED
    assert sideways(phone) <= 0
