"""Bulk: an approver selects five requests in the inbox and approves them together; one of
them changed after the inbox was shown, so four are decided and the fifth is reported, not
decided."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from tests.approvals.test_bulk import bulk_policy
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect


def test_bulk_approval_of_five_decides_four_and_reports_the_stale_fifth(
    page: Page,
    approver: Person,
    submit_security_event: Callable[[str], ApprovalRequest],
) -> None:
    bulk_policy()
    requests = [submit_security_event(f"evt-bulk-{n}") for n in range(5)]

    log_in(page, approver)
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    for request in requests:
        page.get_by_label(f"Select #{request.pk}").check()
    # Meanwhile the third request's input changed: what the inbox shows of it is stale.
    stale = requests[2]
    ApprovalRequest.objects.filter(pk=stale.pk).update(fingerprint="f" * 64)
    page.get_by_role("button", name="Approve selected").click()

    expect(page.get_by_test_id("bulk-summary")).to_contain_text("4 decided, 1 skipped")
    result = page.get_by_test_id("bulk-result")
    expect(result.locator("tbody tr")).to_have_count(5)
    expect(result.locator("tr", has_text=f"#{stale.pk}")).to_contain_text(
        "Skipped: it changed since you saw it"
    )
    screenshot(page, "bulk-result")
    statuses = dict(
        ApprovalRequest.objects.filter(pk__in=[r.pk for r in requests]).values_list("pk", "status")
    )
    assert statuses.pop(stale.pk) == ApprovalStatus.PENDING
    assert set(statuses.values()) == {ApprovalStatus.APPROVED}
    assert not ApprovalDecision.objects.filter(request=stale).exists()
