"""The reports dashboard in a real browser: five charts, another period, the oldest approval.

The history of tests/reports/history.py is moved in time so that its "now" is the live
server's now (the server runs on the real clock).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.reports.history import NOW, History, build_history
from tests.visible_text import codes_shown

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect

# Not asserted: a picture of the dashboard for a person to look at after a run.
REPORTS_PNG = "/tmp/reports.png"  # noqa: S108
CHARTS = [
    "Straight-through rate per week",
    "Runs sent to a person, by stage and reason",
    "Approval wait times",
    "Rates before and after each policy activation",
    "Stage durations",
]


@pytest.fixture
def history(roles: None) -> History:
    return build_history(shift=datetime.now(tz=UTC) - NOW)


def test_ops_lead_reads_the_charts_changes_the_period_and_opens_the_oldest_approval(
    page: Page, history: History
) -> None:
    log_in(page, Person(history.lead, "pw-lena"))
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Reports").click()

    expect(page).to_have_url(re.compile(r"/reports/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Reports")
    expect(page.locator("svg.chart")).to_have_count(6)
    for title in CHARTS:
        expect(page.get_by_role("img", name=re.compile(f"^{re.escape(title)}"))).to_be_visible()
    expect(page.get_by_role("link", name="Last 30 days")).to_have_attribute("aria-current", "true")
    # The last 30 days hold all five approval requests (a1 to a5, from 18 February on).
    handoffs = page.get_by_test_id("handoff-approval_required").locator("td")
    expect(handoffs.nth(2)).to_have_text("5")
    page.screenshot(path=REPORTS_PNG, full_page=True)
    screenshot(page, "reports-dashboard-in-words")
    # Routes, stages, reasons and effects in words; their codes only as quiet secondary text.
    table = page.get_by_test_id("table-straight-through")
    expect(table.get_by_role("columnheader", name="Security review")).to_be_visible()
    expect(page.get_by_test_id("stage-classify").locator("td").first).to_contain_text("Read")
    codes = ["service_desk", "security_review", "approval_required", "queue_account_review"]
    assert codes_shown(page.content(), codes) == []

    page.get_by_role("link", name="Last 7 days").click()

    expect(page).to_have_url(re.compile(r"/reports/\?period=7d$"))
    expect(page.get_by_role("link", name="Last 7 days")).to_have_attribute("aria-current", "true")
    # a3, a4 and a5 in the last seven days; a2 in the seven before.
    expect(handoffs.nth(2)).to_have_text("3")
    expect(handoffs.nth(3)).to_have_text("1")
    expect(page.get_by_test_id("chart-handoffs")).to_contain_text("Decide · Sent for approval")
    csv = page.get_by_role("link", name="Download CSV").nth(1)
    expect(csv).to_have_attribute("href", "/reports/handoffs.csv?period=7d")

    oldest = page.get_by_test_id("oldest-pending")
    expect(oldest).to_contain_text("evt-a4")
    expect(oldest).to_contain_text("waiting 2 d 3 h for security-approvers")
    oldest.get_by_role("link", name="Open its evidence").click()

    request = history.approvals["a4"]
    expect(page).to_have_url(re.compile(rf"/approvals/{request.pk}/$"))
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("Queue an account review")


def test_an_approver_gets_403_from_the_reports(page: Page, history: History) -> None:
    log_in(page, Person(history.approver, "pw-ana"))
    expect(page.get_by_role("navigation", name="Main")).not_to_contain_text("Reports")

    response = page.goto("/reports/")

    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("You may not open this page")
    csv = page.request.get("/reports/handoffs.csv")
    assert csv.status == 403
